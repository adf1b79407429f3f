package dataplane

import (
	"strings"
	"sync"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/policy"
)

// Keys maps check-key hashes to their tenant's current config. It is safe
// for concurrent use; SetTenant swaps a tenant's keys and config at once.
type Keys struct {
	mu       sync.RWMutex
	m        map[[32]byte]*decide.Config
	byTenant map[string][][32]byte
}

// NewKeys returns an empty key table.
func NewKeys() *Keys {
	return &Keys{m: make(map[[32]byte]*decide.Config), byTenant: make(map[string][][32]byte)}
}

// Set makes the check key with hash h answer for config c.
func (k *Keys) Set(h [32]byte, c *decide.Config) {
	k.SetTenant(c.Tenant.ID, append(k.tenantKeys(c.Tenant.ID), h), c)
}

func (k *Keys) tenantKeys(tenant string) [][32]byte {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return append([][32]byte(nil), k.byTenant[tenant]...)
}

// SetTenant makes exactly hashes answer for c's tenant, with c: keys of the
// tenant not in hashes (revoked ones) stop answering.
func (k *Keys) SetTenant(tenant string, hashes [][32]byte, c *decide.Config) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, h := range k.byTenant[tenant] {
		delete(k.m, h)
	}
	for _, h := range hashes {
		k.m[h] = c
	}
	k.byTenant[tenant] = hashes
}

// RemoveTenant drops every key of tenant.
func (k *Keys) RemoveTenant(tenant string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, h := range k.byTenant[tenant] {
		delete(k.m, h)
	}
	delete(k.byTenant, tenant)
}

// Authenticate implements AuthenticateFunc with the bearer token of
// authorization.
func (k *Keys) Authenticate(authorization string) (*decide.Config, error) {
	secret, ok := BearerToken(authorization)
	if !ok {
		return nil, policy.Errorf(policy.CodeUnauthenticated, "missing check key: send Authorization: Bearer <key>")
	}
	return k.Lookup(policy.HashKey(secret))
}

// Lookup returns the config of the tenant whose check key hashes to h.
func (k *Keys) Lookup(h [32]byte) (*decide.Config, error) {
	k.mu.RLock()
	c := k.m[h]
	k.mu.RUnlock()
	if c == nil {
		return nil, policy.Errorf(policy.CodeUnauthenticated, "invalid check key")
	}
	return c, nil
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
