package follower

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/policy"
)

// Keys maps check-key hashes to their tenant's current config, and notes
// which keys were used, for the control plane's "last used". It is safe
// for concurrent use; SetTenant swaps a tenant's keys and config at once.
type Keys struct {
	mu       sync.RWMutex
	m        map[[32]byte]*keyEntry
	byTenant map[string][]policy.CheckKey
	now      func() time.Time // the clock expiries are read against
	ready    atomic.Pointer[func() bool]
	hashes   *keyHashes
}

// errNotReady answers a check before the decider has any configuration.
var errNotReady = policy.Errorf(policy.CodeUnavailable, "the decider has no configuration yet: retry")

// SetReady makes Lookup answer CodeUnavailable while ready says false: a
// decider without its first configuration (from the control plane or its
// state file) knows no key, and refusing every one as invalid would make
// callers take a restart for a bad key — the SDK and Envoy apply their
// failure modes to an unavailable decider, not to a refusal.
func (k *Keys) SetReady(ready func() bool) { k.ready.Store(&ready) }

// keyEntry is a check key's config, its expiry (Unix ns; 0: never) and
// whether it was used since the last TakeUsed. Its config and expiry are
// guarded by Keys.mu.
type keyEntry struct {
	c       *decide.Compiled
	expires int64
	used    atomic.Bool
}

// NewKeys returns an empty key table.
func NewKeys() *Keys {
	return &Keys{m: make(map[[32]byte]*keyEntry), byTenant: make(map[string][]policy.CheckKey), now: time.Now, hashes: newKeyHashes()}
}

// Set makes the check key with hash h answer for config c.
func (k *Keys) Set(h [32]byte, c *decide.Compiled) {
	k.SetTenant(c.Tenant.ID, append(k.tenantKeys(c.Tenant.ID), policy.CheckKey{Hash: h}), c)
}

func (k *Keys) tenantKeys(tenant string) []policy.CheckKey {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return append([]policy.CheckKey(nil), k.byTenant[tenant]...)
}

// SetTenant makes exactly keys answer for c's tenant, with c, each until
// its expiry: keys of the tenant not in keys (revoked ones) stop
// answering. Kept keys keep their use.
func (k *Keys) SetTenant(tenant string, keys []policy.CheckKey, c *decide.Compiled) {
	k.mu.Lock()
	defer k.mu.Unlock()
	kept := make(map[[32]byte]*keyEntry, len(keys))
	for _, ck := range k.byTenant[tenant] {
		kept[ck.Hash] = k.m[ck.Hash]
		delete(k.m, ck.Hash)
	}
	for _, ck := range keys {
		e := kept[ck.Hash]
		if e == nil {
			e = &keyEntry{}
		}
		e.c, e.expires = c, 0
		if !ck.ExpiresAt.IsZero() {
			e.expires = max(ck.ExpiresAt.UnixNano(), 1)
		}
		k.m[ck.Hash] = e
	}
	k.byTenant[tenant] = keys
}

// RemoveTenant drops every key of tenant.
func (k *Keys) RemoveTenant(tenant string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, ck := range k.byTenant[tenant] {
		delete(k.m, ck.Hash)
	}
	delete(k.byTenant, tenant)
}

// Authenticate implements AuthenticateFunc with the bearer token of
// authorization.
func (k *Keys) Authenticate(authorization string) (*decide.Compiled, error) {
	secret, ok := BearerToken(authorization)
	if !ok {
		return nil, policy.Errorf(policy.CodeUnauthenticated, "missing check key: send Authorization: Bearer <key>")
	}
	return k.Lookup(k.hashes.of(secret))
}

// Lookup returns the config of the tenant whose check key hashes to h, and
// notes the key's use. An expired key is refused from its expiry on, not
// from the tenant's next config version.
func (k *Keys) Lookup(h [32]byte) (*decide.Compiled, error) {
	if r := k.ready.Load(); r != nil && !(*r)() {
		return nil, errNotReady
	}
	k.mu.RLock()
	e := k.m[h]
	var c *decide.Compiled
	var expires int64
	if e != nil {
		c, expires = e.c, e.expires
	}
	k.mu.RUnlock()
	if c == nil {
		return nil, policy.Errorf(policy.CodeUnauthenticated, "invalid check key")
	}
	if expires != 0 && k.now().UnixNano() >= expires {
		return nil, policy.Errorf(policy.CodeUnauthenticated, "expired check key")
	}
	if !e.used.Load() { // a load, not a store, on the hot path: the flag's line stays shared
		e.used.Store(true)
	}
	return c, nil
}

// TakeUsed returns the hashes of up to max keys used since they were
// last taken, and clears their use; the others stay for the next call.
func (k *Keys) TakeUsed(max int) [][32]byte {
	k.mu.RLock()
	defer k.mu.RUnlock()
	var out [][32]byte
	for h, e := range k.m {
		if len(out) == max {
			break
		}
		if e.used.Swap(false) {
			out = append(out, h)
		}
	}
	return out
}

// MarkUsed notes the use of the keys of hashes again (TakeUsed's, when
// they could not be reported).
func (k *Keys) MarkUsed(hashes [][32]byte) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	for _, h := range hashes {
		if e := k.m[h]; e != nil {
			e.used.Store(true)
		}
	}
}

// BearerToken returns the token of an Authorization header's "Bearer
// <token>" value.
func BearerToken(authorization string) (string, bool) {
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}
