package controlplane

import (
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// authGuard limits the invalid keys an address may send: each costs a
// database lookup, so a flood of them from one address is refused before
// it reaches the database, with resource_exhausted and how long to wait.
// It counts with Sluice's own in-process engine: a token bucket per
// address of perMinute a minute, as many at once.
//
// The same guard bounds the calls each key makes (newKeyGuard, take), so
// that one tenant's runaway script cannot take the database from others.
type authGuard struct {
	engine *limit.Engine
	bucket *limit.Limiter
	now    func() time.Time
	what   string // what is counted, for the refusal: "invalid keys from this address"
}

// newAuthGuard returns a guard of perMinute invalid keys a minute per
// address, or nil (no limit) when perMinute is 0 or less.
func newAuthGuard(perMinute int, now func() time.Time) *authGuard {
	return newGuard(perMinute, now, "invalid keys from this address")
}

// newKeyGuard returns a guard of perMinute calls a minute per key, or nil
// (no limit) when perMinute is 0 or less.
func newKeyGuard(perMinute int, now func() time.Time) *authGuard {
	return newGuard(perMinute, now, "calls with this key")
}

func newGuard(perMinute int, now func() time.Time, what string) *authGuard {
	if perMinute <= 0 {
		return nil
	}
	bucket, err := limit.Compile(policy.Params{Algorithm: policy.TokenBucket, Limit: int64(perMinute), Window: time.Minute})
	if err != nil {
		panic(err) // a positive limit a minute is valid
	}
	if now == nil {
		now = time.Now
	}
	// Addresses beyond the cap evict the nearest to refilling: memory
	// stays bounded under a flood from many addresses.
	return &authGuard{engine: limit.NewEngine(limit.EngineConfig{MaxKeys: 100_000}), bucket: bucket, now: now, what: what}
}

// check refuses the client address addr while it has no invalid key left
// to send.
func (g *authGuard) check(addr string) error {
	if g == nil {
		return nil
	}
	if r := g.engine.Allow(addr, g.bucket, limit.Args{Now: g.now().UnixMicro()}); r.Remaining < 1 {
		return g.refusal()
	}
	return nil
}

// take counts one call of key, refusing it when the key has none left.
func (g *authGuard) take(key string) error {
	if g == nil {
		return nil
	}
	if r := g.engine.Allow(key, g.bucket, limit.Args{Now: g.now().UnixMicro(), Cost: 1}); !r.Allowed {
		return g.refusal()
	}
	return nil
}

// refusal is resource_exhausted, saying how long until one more is
// allowed: as soon as one token is back.
func (g *authGuard) refusal() error {
	wait := max(time.Minute/time.Duration(g.bucket.Capacity()), time.Second)
	err := connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("too many %s: try again in %v", g.what, wait.Round(time.Second)))
	err.Meta().Set("Retry-After", strconv.Itoa(int(wait.Round(time.Second)/time.Second)))
	return err
}

// failed counts an invalid key from addr.
func (g *authGuard) failed(addr string) {
	if g != nil {
		g.engine.Allow(addr, g.bucket, limit.Args{Now: g.now().UnixMicro(), Cost: 1})
	}
}
