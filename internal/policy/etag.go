package policy

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
)

// ETag identifies this state of the rule, for updates conditioned on it
// (AIP-154's etag): two rules have the same etag exactly when every field
// is the same, so a read-modify-write that carries the etag it read can be
// refused when another write came between.
func (r *Rule) ETag() string { return etag(r) }

// ETag identifies this state of the tenant, as Rule.ETag does a rule's.
func (t *Tenant) ETag() string { return etag(t) }

// ETag identifies this state of the override, as Rule.ETag does a rule's;
// its expiry counts as an instant, whatever the time zone it was read in.
func (o *Override) ETag() string {
	c := *o
	c.ExpiresAt = c.ExpiresAt.UTC()
	return etag(&c)
}

// etag hashes v's JSON, which encoding/json writes deterministically for
// the domain's structs (fields in order, no maps). 12 bytes of SHA-256
// leave no practical chance of two states colliding.
func etag(v any) string {
	b, err := json.Marshal(v)
	if err != nil { // the domain types are plain data: cannot happen
		panic("policy: etag: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}
