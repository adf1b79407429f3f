// Package limit implements Sluice's rate limiting algorithms as pure
// functions of (state, now, cost, parameters), and the in-process engine
// that keeps limiter states in memory.
//
// Time is an int64 count of microseconds since the Unix epoch, the
// resolution of Redis TIME. Arithmetic is int64 or float64 in a fixed order
// so that the Lua scripts of package redisengine, run on the same inputs,
// give the same answers: every value stays below 2^53, and no product is
// fused into another operation (explicit float64 conversions prevent it).
package limit

import (
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// ErrOverloaded is what an engine answers (wrapped or as is) for a
// decision it did not send to its shared store within the decision's time
// budget because of work queued ahead of it in this process (a pipeline, a
// connection, a CPU): the decider's overload, not a failure of the store.
// Such a decision is counted as overload and never trips a breaker.
var ErrOverloaded = errors.New("limit: decision not sent to the store within its budget (overload)")

// Never is the RetryAfter of a request that can never be admitted, such as
// one whose cost exceeds the limiter's capacity or is negative.
const Never time.Duration = -1

// Result is the answer for one rule.
type Result struct {
	Allowed bool
	// Limit is the capacity the answer is measured against: the burst of
	// bucket algorithms, the queue size of LeakyBucket, the limit otherwise.
	Limit int64
	// Remaining is how many more cost units would be admitted now.
	Remaining int64
	// ResetAfter is how long until the limiter is back to full capacity if
	// nothing else is admitted.
	ResetAfter time.Duration
	// RetryAfter is, for a rejection, how long until the same request would
	// be admitted if nothing else is; Never if it cannot be. 0 when allowed.
	RetryAfter time.Duration
	// Delay is, for an admitted LeakyBucket request, how long the caller
	// must wait before proceeding.
	Delay time.Duration
}

// AsCost turns r, a limiter's answer to a read (cost 0, nothing
// consumed), into its answer to a request of cost against the limiter of
// capacity, still consuming nothing: admitted when the remaining covers
// the cost, else to be retried at the reset (Never, above the capacity).
func (r *Result) AsCost(cost, capacity int64) {
	if r.Allowed && r.Remaining < cost {
		r.Allowed, r.RetryAfter = false, r.ResetAfter
		if cost > capacity {
			r.RetryAfter = Never
		}
	}
}

// State is the stored state of one key. Its meaning depends on the
// algorithm; the zero State is a fresh limiter for every algorithm.
type State struct {
	T   int64   // a time in µs: last refill, window start or next free time
	X   float64 // tokens, a count, or a theoretical arrival time in µs
	Y   float64 // the previous window's count, or stored permits
	Ext []int64 // variable-size state: logs, sub-buckets, leases
}

// Args are the inputs of one evaluation besides the state.
type Args struct {
	Now  int64 // µs since the Unix epoch
	Cost int64
	// Lease identifies a Concurrency lease; ignored by other algorithms.
	Lease int64
	// Spent is what other regions took of a global limit
	// (policy.ScopeGlobal) in the window, as last replicated: a fixed or
	// sliding window admits while its own count, Spent and Cost fit the
	// limit. Other algorithms ignore it.
	Spent int64
}

// Limiter is a rule's parameters compiled for evaluation. Build it with
// Compile; it is immutable and safe for concurrent use.
type Limiter struct {
	alg      policy.Algorithm
	limit    int64
	capacity int64 // largest admissible cost
	shown    int64 // what Result.Limit reports
	window   int64 // µs
	calendar policy.Calendar
	zone     *time.Location // of calendar windows
	interval float64        // µs per unit: window / limit
	perUS    float64        // 1 / interval: multiplying is cheaper than dividing
	tau      float64        // meters: the debt bound in µs
	bound    float64        // tau·slack, what debts are compared with
	meters   bool           // a meter without warm-up: Step's fast path
	gran     int64          // µs per sub-bucket
	buckets  int            // sub-buckets per window
	leaseTTL int64          // µs
	warm     *warmUp        // nil unless the token bucket warms up
	ext      bool           // keeps variable-size state (State.Ext)
}

// Compile returns the Limiter for p. p must be valid (see
// policy.Params.Validate); Compile returns the validation error otherwise.
func Compile(p policy.Params) (*Limiter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		alg:      p.Algorithm,
		limit:    p.Limit,
		capacity: p.Capacity(),
		window:   p.Window.Microseconds(),
		calendar: p.Calendar,
		leaseTTL: p.LeaseTTL.Microseconds(),
	}
	var err error
	if l.zone, err = policy.Location(p.TimeZone); err != nil {
		return nil, err // not reached: Validate loads it
	}
	if l.window > 0 {
		l.interval = float64(l.window) / float64(l.limit)
		l.perUS = 1 / l.interval
	}
	l.tau = float64(l.capacity) * l.interval
	l.ext = p.Algorithm == policy.SlidingLog || p.Algorithm == policy.SlidingBuckets || p.Algorithm.Leases()
	l.shown = l.capacity
	switch p.Algorithm {
	case policy.LeakyBucket:
		// The last unit of a request must start within maxDelay.
		l.tau = float64(p.MaxDelay.Microseconds()) + l.interval
		l.capacity = floorNonNeg(l.tau * slack / l.interval)
		l.shown = l.capacity
	case policy.SlidingBuckets:
		l.gran = p.Granularity.Microseconds()
		l.buckets = int(l.window / l.gran)
	case policy.TokenBucket:
		if p.WarmUp > 0 {
			l.warm = newWarmUp(l.interval, float64(p.WarmUp.Microseconds()), p.ColdFactor)
			// Any cost a cold bucket admits at once stays admissible
			// (after waiting) in every state; larger ones are refused.
			l.capacity = l.warm.capacity(p.Capacity())
		}
	}
	l.bound = l.tau * slack
	l.meters = l.warm == nil && (l.alg == policy.TokenBucket || l.alg == policy.GCRA || l.alg == policy.LeakyBucket)
	return l, nil
}

// MustCompile is Compile for parameters known to be valid; it panics
// otherwise. For tests and built-in defaults.
func MustCompile(p policy.Params) *Limiter {
	l, err := Compile(p)
	if err != nil {
		panic(err)
	}
	return l
}

// Algorithm returns the algorithm l evaluates.
func (l *Limiter) Algorithm() policy.Algorithm { return l.alg }

// Capacity returns the largest cost a single request can have and be admitted.
func (l *Limiter) Capacity() int64 { return l.capacity }

// usesExt reports whether the algorithm keeps variable-size state.
func (l *Limiter) usesExt() bool { return l.ext }

// Eval evaluates one request against state s and returns the state to store
// and the answer. A rejected request, a zero cost or an invalid cost returns
// s unchanged: nothing is consumed. A negative cost, or one above Capacity,
// is rejected with RetryAfter Never. Time going backwards never admits
// more: a clock behind the latest time the state has seen is taken as that
// time, so no time passes until it catches up.
//
// buf is scratch space for the new variable-size state (it may be nil); the
// returned State's Ext may alias it, and never aliases s.Ext.
func (l *Limiter) Eval(s State, a Args, buf []int64) (State, Result) {
	var r Result
	ns := s
	if l.Step(&ns, a, buf, &r) {
		return ns, r
	}
	return s, r
}

// Step is Eval in place, for stores that keep states themselves: it writes
// the answer into r and, when it returns true (an admitted request with a
// positive cost), the new state into s. Otherwise s is left as it was.
func (l *Limiter) Step(s *State, a Args, buf []int64, r *Result) bool {
	if l.meters && a.Cost > 0 && a.Cost <= l.capacity { // the common case
		l.meter(s, a, r) // writes s only when it admits
		return r.Allowed
	}
	if a.Cost <= 0 || a.Cost > l.capacity {
		peek, invalid := *s, a.Cost != 0
		a.Cost = 0
		l.step(&peek, a, buf, r)
		if invalid {
			r.Allowed, r.RetryAfter, r.Delay = false, Never, 0
		}
		return false
	}
	l.step(s, a, buf, r) // algorithms write s only when they admit
	return r.Allowed
}

func (l *Limiter) step(s *State, a Args, buf []int64, r *Result) {
	switch l.alg {
	case policy.TokenBucket:
		if l.warm != nil {
			l.warmingBucket(s, a, r)
			return
		}
		l.meter(s, a, r)
	case policy.GCRA, policy.LeakyBucket:
		l.meter(s, a, r)
	case policy.FixedWindow:
		l.fixedWindow(s, a, r)
	case policy.SlidingWindow:
		l.slidingWindow(s, a, r)
	case policy.SlidingBuckets:
		l.slidingBuckets(s, a, buf, r)
	case policy.SlidingLog:
		l.slidingLog(s, a, buf, r)
	case policy.Concurrency, policy.AdaptiveConcurrency:
		l.acquire(s, a, buf, r)
	default:
		panic("limit: unknown algorithm " + l.alg.String()) // Compile admits only known ones
	}
}

// micros converts a non-negative float64 count of microseconds, rounded up,
// to a Duration.
func micros(us float64) time.Duration {
	if us <= 0 {
		return 0
	}
	t := int64(us) // truncation is floor for positive numbers, and cheaper
	if float64(t) < us {
		t++
	}
	return time.Duration(t) * time.Microsecond
}

// floorNonNeg returns floor(x) as an int64, or 0 for negative x.
func floorNonNeg(x float64) int64 {
	if x <= 0 {
		return 0
	}
	return int64(x)
}

// ExpiresAt returns the time (µs) from which a key whose new state has time
// t (State.T, the evaluation's effective time: answers are measured from
// it) and whose answer has ResetAfter reset equals a fresh one and may be
// forgotten.
func ExpiresAt(now int64, reset time.Duration) int64 {
	return now + int64(reset/time.Microsecond)
}

// Slack is the relative tolerance of debt comparisons (see meter.go), for
// engines that evaluate the same algorithms elsewhere.
const Slack = slack

// Constants are a Limiter's derived values, for engines that evaluate the
// same algorithms elsewhere (the Lua scripts of package redisengine): given
// the same constants, they compute the same answers.
type Constants struct {
	Algorithm                                      policy.Algorithm
	Capacity, Shown, Limit, Window, Gran           int64
	Calendar                                       policy.Calendar
	Zone                                           *time.Location // of Calendar
	Buckets                                        int
	LeaseTTL                                       int64
	Interval, PerUS, Bound                         float64
	Warm                                           bool
	Stable, Threshold, MaxPermits, Slope, CoolDown float64
}

// Constants returns l's derived values.
func (l *Limiter) Constants() Constants {
	c := Constants{Algorithm: l.alg, Capacity: l.capacity, Shown: l.shown, Limit: l.limit, Window: l.window, Calendar: l.calendar, Zone: l.zone,
		Gran: l.gran, Buckets: l.buckets, LeaseTTL: l.leaseTTL, Interval: l.interval, PerUS: l.perUS, Bound: l.bound}
	if w := l.warm; w != nil {
		c.Warm, c.Stable, c.Threshold, c.MaxPermits, c.Slope, c.CoolDown = true, w.stable, w.threshold, w.maxPermits, w.slope, w.coolDown
	}
	return c
}
