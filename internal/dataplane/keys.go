package dataplane

import (
	"net/http"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/policy"
)

// Keys maps check-key hashes to their tenant's current config. It is safe
// for concurrent use; Set replaces a tenant's entry when its config changes.
type Keys struct {
	mu sync.RWMutex
	m  map[[32]byte]*decide.Config
}

// NewKeys returns an empty key table.
func NewKeys() *Keys { return &Keys{m: make(map[[32]byte]*decide.Config)} }

// Set makes the check key with hash h answer for config c.
func (k *Keys) Set(h [32]byte, c *decide.Config) {
	k.mu.Lock()
	k.m[h] = c
	k.mu.Unlock()
}

// Authenticate implements AuthenticateFunc with the bearer token of r.
func (k *Keys) Authenticate(r *http.Request) (*decide.Config, error) {
	secret, ok := BearerToken(r)
	if !ok {
		return nil, policy.Errorf(policy.CodeUnauthenticated, "missing check key: send Authorization: Bearer <key>")
	}
	k.mu.RLock()
	c := k.m[policy.HashKey(secret)]
	k.mu.RUnlock()
	if c == nil {
		return nil, policy.Errorf(policy.CodeUnauthenticated, "invalid check key")
	}
	return c, nil
}

// BearerToken returns the token of r's "Authorization: Bearer" header.
func BearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}
