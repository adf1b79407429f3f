package decide

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
)

// Counters are the shared counters a Decider decides against: Redis
// (redisengine.Engine), or this process's memory (InProcess). They own
// their failure handling: a store that fails apart (a Redis Cluster's
// masters) keeps a circuit breaker per part.
type Counters interface {
	// AllowBatch answers each call of batch all-or-nothing (see
	// limit.Engine.AllowAll), writing its Allowed and results, or the Err
	// that kept it from deciding: limit.ErrOverloaded (wrapped) when the
	// call was not sent within budget for work queued in this process,
	// another error when the store failed or its breaker is open. The
	// calls are independent; a store that can sends them together (one
	// Redis pipeline). budget bounds each call (0: ctx alone).
	AllowBatch(ctx context.Context, budget time.Duration, batch []limit.Call)
	// Reset resets the counters of reqs' keys: the next request of each
	// meets a fresh limiter.
	Reset(ctx context.Context, reqs []limit.Request) error
	// Release ends the concurrency lease of each of reqs (its Lease).
	Release(ctx context.Context, reqs []limit.Request) error
	// Charge adds to the counters what the overload policy admitted
	// without them (see charger): each charge's cost on its key, at its
	// time, with no bound check. Counters whose state for an algorithm
	// does not add up leave its charges out.
	Charge(ctx context.Context, charges []limit.Charge) error
	// Breaker is the state of the counters' circuit breaker: "closed",
	// "half-open" or "open"; the worst part's when each has its own.
	Breaker() string
	// Failures counts the calls that failed (errors and timeouts; not
	// overload, nor calls an open breaker refused), for metrics.
	Failures() int64
}

// InProcess keeps the counters in this process's memory, with the time
// from Now: for a decider alone, the in-process fallback's tests, and
// tools. It never fails.
type InProcess struct {
	Engine *limit.Engine
	Now    func() time.Time
}

// AllowBatch implements Counters.
func (l InProcess) AllowBatch(_ context.Context, _ time.Duration, batch []limit.Call) {
	now := l.Now().UnixMicro()
	for i := range batch {
		c := &batch[i]
		c.Allowed, c.Err = l.Engine.AllowAll(c.Reqs, now, c.Res), nil
	}
}

// Release implements Counters.
func (l InProcess) Release(_ context.Context, reqs []limit.Request) error {
	now := l.Now().UnixMicro()
	for _, r := range reqs {
		l.Engine.Release(r.Key, r.Limiter, now, r.Lease)
	}
	return nil
}

// Reset implements Counters.
func (l InProcess) Reset(_ context.Context, reqs []limit.Request) error {
	for _, r := range reqs {
		l.Engine.Reset(r.Key, r.Limiter)
	}
	return nil
}

// Charge implements Counters: the in-process counters decide every
// request, so nothing is admitted without them.
func (InProcess) Charge(context.Context, []limit.Charge) error { return nil }

// Breaker implements Counters: memory has none.
func (InProcess) Breaker() string { return "closed" }

// Failures implements Counters: memory does not fail.
func (InProcess) Failures() int64 { return 0 }
