// Package enginetest is the conformance suite of decision engines: the same
// scenarios, with the same clock, run on the in-process engine and on the
// engine under test, whose answers must be identical: every decision, and
// every rule's allowed, limit, remaining, reset, retry and delay.
package enginetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Engine is what the suite drives, with explicit time (µs).
type Engine interface {
	AllowAllAt(ctx context.Context, reqs []limit.Request, now int64, res []limit.Result) (bool, error)
	ReleaseAt(ctx context.Context, key string, l *limit.Limiter, now, lease int64) error
}

// Params are the rule parameters the scenarios use: every algorithm, and
// the edges (warm-up, a queue without delay, very long windows, big limits,
// calendar windows, in UTC and in time zones).
func Params() []policy.Params {
	ms := time.Millisecond
	return []policy.Params{
		{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Second, Burst: 5},
		{Algorithm: policy.TokenBucket, Limit: 7, Window: 3 * time.Second},
		{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Second, Burst: 6, WarmUp: 2 * time.Second},
		{Algorithm: policy.TokenBucket, Limit: 3, Window: time.Second, Burst: 9, WarmUp: 500 * ms, ColdFactor: 2.5},
		{Algorithm: policy.GCRA, Limit: 7, Window: time.Second, Burst: 3},
		{Algorithm: policy.GCRA, Limit: policy.MaxLimit, Window: policy.MaxWindow},
		{Algorithm: policy.LeakyBucket, Limit: 5, Window: time.Second, MaxDelay: 700 * ms},
		{Algorithm: policy.LeakyBucket, Limit: 3, Window: time.Second},
		{Algorithm: policy.FixedWindow, Limit: 5, Window: 1300 * ms},
		{Algorithm: policy.FixedWindow, Limit: policy.MaxLimit, Window: policy.MaxWindow},
		{Algorithm: policy.SlidingLog, Limit: 6, Window: 900 * ms},
		{Algorithm: policy.SlidingWindow, Limit: 7, Window: time.Second},
		{Algorithm: policy.SlidingWindow, Limit: 1000, Window: time.Hour},
		{Algorithm: policy.SlidingBuckets, Limit: 5, Window: time.Second, Granularity: 100 * ms},
		{Algorithm: policy.SlidingBuckets, Limit: 9, Window: 3 * time.Second, Granularity: 1500 * ms},
		{Algorithm: policy.Concurrency, Limit: 3, LeaseTTL: 2 * time.Second},
		{Algorithm: policy.FixedWindow, Limit: 5, Calendar: policy.CalendarWeek},
		{Algorithm: policy.FixedWindow, Limit: 4, Calendar: policy.CalendarMonth},
		{Algorithm: policy.FixedWindow, Limit: policy.MaxLimit, Calendar: policy.CalendarYear},
		{Algorithm: policy.FixedWindow, Limit: 6, Calendar: policy.CalendarDay, TimeZone: "America/New_York"},
		{Algorithm: policy.FixedWindow, Limit: 3, Calendar: policy.CalendarWeek, TimeZone: "Asia/Kolkata"},
	}
}

// t0 is the scenarios' first instant (µs since the epoch).
const t0 = 1_700_000_040_000_000

// Run runs the suite against the engine newEngine returns, each scenario
// on a fresh one. keyPrefix isolates the run's keys; every decision's keys
// share one hash tag, so cluster engines can take them in one call.
func Run(t *testing.T, keyPrefix string, newEngine func(t *testing.T) Engine) {
	for i, p := range Params() {
		t.Run(fmt.Sprintf("%d-%s", i, p.Algorithm), func(t *testing.T) {
			t.Parallel()
			scenario(t, keyPrefix, uint64(i), p, newEngine(t))
		})
	}
	t.Run("mixed", func(t *testing.T) {
		t.Parallel()
		mixed(t, keyPrefix, newEngine(t))
	})
}

// Scenario drives the random decisions of one scenario (seed) over three
// rules of parameters p on under, failing t at the first answer that is
// not the in-process engine's: for fuzzing over parameters Params does not
// hold.
func Scenario(t *testing.T, keyPrefix string, seed uint64, p policy.Params, under Engine) {
	scenario(t, keyPrefix, seed, p, under)
}

// rule is a scenario's rule: a key and the limiter it is always used with.
type rule struct {
	key string
	l   *limit.Limiter
}

// scenario drives 300 random decisions over three rules of the same
// parameters (two of which may share a key within one decision).
func scenario(t *testing.T, prefix string, seed uint64, p policy.Params, under Engine) {
	l := limit.MustCompile(p)
	tag := fmt.Sprintf("%s{t%d|c}", prefix, seed)
	rules := []rule{{tag + "a", l}, {tag + "b", l}, {tag + "c", l}}
	drive(t, seed, rules, under)
}

// mixed drives decisions whose rules use different algorithms at once.
func mixed(t *testing.T, prefix string, under Engine) {
	var rules []rule
	for i, p := range Params() {
		rules = append(rules, rule{fmt.Sprintf("%s{mixed|c}r%d", prefix, i), limit.MustCompile(p)})
	}
	drive(t, 99, rules, under)
}

func drive(t *testing.T, seed uint64, rules []rule, under Engine) {
	t.Helper()
	ctx := context.Background()
	ref := limit.NewEngine(limit.EngineConfig{})
	rng := rand.New(rand.NewPCG(seed, 7))
	now := int64(t0)
	for step := range 300 {
		switch d := rng.IntN(20); {
		case d == 0:
			now -= int64(rng.IntN(500_000)) // the clock goes back
		case d == 1: // days: calendar windows end (t0 is in mid-November)
			now += int64(rng.IntN(3 * 24 * 3600 * 1_000_000))
		case d < 4:
			now += int64(rng.IntN(5_000_000))
		default:
			now += int64(rng.IntN(150_000))
		}
		if rng.IntN(15) == 0 { // release a lease
			r := rules[rng.IntN(len(rules))]
			lease := int64(rng.IntN(5))
			ref.Release(r.key, r.l, now, lease)
			if err := under.ReleaseAt(ctx, r.key, r.l, now, lease); err != nil {
				t.Fatalf("step %d: release: %v", step, err)
			}
			continue
		}
		reqs := make([]limit.Request, 1+rng.IntN(3))
		for i := range reqs {
			r := rules[rng.IntN(len(rules))]
			reqs[i] = limit.Request{Key: r.key, Limiter: r.l, Cost: cost(rng), Lease: int64(rng.IntN(5)), Shadow: rng.IntN(5) == 0}
		}
		want := make([]limit.Result, len(reqs))
		got := make([]limit.Result, len(reqs))
		wantOK := ref.AllowAll(reqs, now, want)
		gotOK, err := under.AllowAllAt(ctx, reqs, now, got)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if gotOK != wantOK {
			t.Fatalf("step %d at t0%+dµs: decision %v, the in-process engine says %v\nrequests %s\ngot  %+v\nwant %+v",
				step, now-t0, gotOK, wantOK, describe(reqs), got, want)
		}
		for i := range reqs {
			if got[i] != want[i] {
				t.Fatalf("step %d at t0%+dµs, rule %d of %s:\ngot  %+v\nwant %+v", step, now-t0, i, describe(reqs), got[i], want[i])
			}
		}
	}
}

func cost(rng *rand.Rand) int64 {
	switch rng.IntN(25) {
	case 0:
		return 0
	case 1:
		return -1
	case 2:
		return 1_000_000_000_000 // above every capacity
	case 3, 4:
		return int64(2 + rng.IntN(6))
	}
	return 1
}

func describe(reqs []limit.Request) string {
	s := ""
	for _, r := range reqs {
		s += fmt.Sprintf("[%s %s cost=%d lease=%d shadow=%v] ", r.Key, r.Limiter.Algorithm(), r.Cost, r.Lease, r.Shadow)
	}
	return s
}

// AdmitsAtOnce is what a fresh limiter l admits at the instant now (µs),
// one unit at a time with distinct leases, up to most: the exact answer
// for that many concurrent clients, and the exact bound of the cost l
// admits at that instant whatever the costs.
func AdmitsAtOnce(l *limit.Limiter, now, most int64) int64 {
	var s limit.State
	for n := range most {
		ns, r := l.Eval(s, limit.Args{Now: now, Cost: 1, Lease: n + 1}, nil)
		if !r.Allowed {
			return n
		}
		s = ns
	}
	return most
}
