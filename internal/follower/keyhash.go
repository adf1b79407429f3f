package follower

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/policy"
)

// keyHashes remembers the hashes of the check keys last presented, so
// that a key is hashed (SHA-256, policy.HashKey) once, not on every
// check. It holds at most memoSlots keys, each in a slot its maphash
// picks, a later key taking the slot of an earlier one. The keys stay in
// the decider's memory, as they pass through it on every check; they
// are never written anywhere.
type keyHashes struct {
	seed  maphash.Seed
	slots [memoSlots]atomic.Pointer[hashedKey]
}

const memoSlots = 1024

type hashedKey struct {
	secret string
	hash   [32]byte
}

func newKeyHashes() *keyHashes { return &keyHashes{seed: maphash.MakeSeed()} }

// of is policy.HashKey(secret).
func (m *keyHashes) of(secret string) [32]byte {
	slot := &m.slots[maphash.String(m.seed, secret)%memoSlots]
	if e := slot.Load(); e != nil && sameSecret(e.secret, secret) {
		return e.hash
	}
	e := &hashedKey{secret: secret, hash: policy.HashKey(secret)}
	slot.Store(e)
	return e.hash
}

// sameSecret compares two keys in a time that depends on their length
// alone, as crypto/subtle does.
func sameSecret(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	var d byte
	for i := range len(a) {
		d |= a[i] ^ b[i]
	}
	return d == 0
}
