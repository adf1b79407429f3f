package policy

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// Key secrets look like "sk_check_" + 32 base32 characters (160 random
// bits). The kind is visible so a leaked key is recognisable in a scan.
var keyPrefixes = map[KeyKind]string{KeyAdmin: "sk_admin_", KeyCheck: "sk_check_", KeyViewer: "sk_viewer_"}

// NewKeySecret returns a new random secret of kind, and its display prefix
// (the kind and the first four random characters).
func NewKeySecret(kind KeyKind) (secret, prefix string) {
	var b [20]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	secret = keyPrefixes[kind] + strings.ToLower(base32.StdEncoding.EncodeToString(b[:]))
	return secret, secret[:len(keyPrefixes[kind])+4]
}

// HashKey returns the SHA-256 of a secret: the only form in which keys are
// stored or compared. The secrets carry 160 random bits, so a fast hash is
// enough; a slow password hash would only slow every check down. A
// secret of up to 64 bytes (every key's) is hashed from a copy on the
// stack: every check hashes its key, and converting it allocated.
func HashKey(secret string) [32]byte {
	var buf [64]byte
	if len(secret) <= len(buf) {
		return sha256.Sum256(append(buf[:0], secret...))
	}
	return sha256.Sum256([]byte(secret))
}
