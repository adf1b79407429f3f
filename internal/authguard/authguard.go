// Package authguard limits what each caller may do a minute, counted with
// Sluice's own in-process engine: the invalid keys an address may send,
// the calls a key may make. Both servers use it, the control plane (where
// each invalid key costs a database lookup) and the deciders (where
// guessing keys must be slow and seen).
package authguard

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Guard is a token bucket per name (an address, a key) of a number a
// minute, as many at once. A nil *Guard limits nothing. It is safe for
// concurrent use; memory stays bounded under a flood from many names
// (beyond 100,000, the nearest to refilling is evicted).
type Guard struct {
	engine *limit.Engine
	bucket *limit.Limiter
	now    func() time.Time
	what   string // what is counted, for the refusal: "invalid keys from this address"
}

// New returns a guard of perMinute a minute per name, or nil (no limit)
// when perMinute is 0 or less; now nil means time.Now. what names what
// is counted in refusals.
func New(perMinute int, now func() time.Time, what string) *Guard {
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
	return &Guard{engine: limit.NewEngine(limit.EngineConfig{MaxKeys: 100_000}), bucket: bucket, now: now, what: what}
}

// RefusedError is a guard's refusal: how long until one more is allowed.
type RefusedError struct {
	What string
	Wait time.Duration
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("too many %s: try again in %v", e.What, e.Wait)
}

// Check refuses name while it has nothing left (without counting).
func (g *Guard) Check(name string) error {
	if g == nil {
		return nil
	}
	if r := g.engine.Allow(name, g.bucket, limit.Args{Now: g.now().UnixMicro()}); r.Remaining < 1 {
		return g.refusal()
	}
	return nil
}

// Take counts one of name, refusing it when it has none left.
func (g *Guard) Take(name string) error {
	if g == nil {
		return nil
	}
	if r := g.engine.Allow(name, g.bucket, limit.Args{Now: g.now().UnixMicro(), Cost: 1}); !r.Allowed {
		return g.refusal()
	}
	return nil
}

// Failed counts one of name (an invalid key from an address), whether or
// not it had any left.
func (g *Guard) Failed(name string) {
	if g != nil {
		g.engine.Allow(name, g.bucket, limit.Args{Now: g.now().UnixMicro(), Cost: 1})
	}
}

// refusal says how long until one more is allowed: as soon as one token
// is back, in whole seconds.
func (g *Guard) refusal() error {
	wait := max(time.Minute/time.Duration(g.bucket.Capacity()), time.Second)
	return &RefusedError{What: g.what, Wait: wait.Round(time.Second)}
}
