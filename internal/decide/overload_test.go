package decide

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/testkit/enginetest"
	"github.com/sluicehq/sluice/internal/testkit/logtest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// quiet is a logger that writes nowhere.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// tenantOf compiles a tenant of one rule keyed by client_id.
func tenantOf(t *testing.T, id string, p policy.Params, mode policy.FailureMode) *Compiled {
	t.Helper()
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: id, Slug: id, Name: id, DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{{ID: id + "-r", Name: "per-client", KeyBy: []string{"client_id"},
			Enabled: true, FailureMode: mode, Params: p}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A tenant is admitted up to its fair share of the decider's bound
// whatever the others do, and beyond it only while the decider has room.
func TestAdmissionSharesFairly(t *testing.T) {
	t.Parallel()
	a := newAdmission(8, quiet(), time.Now)
	flood, calm := tenantOf(t, "flood", policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Minute}, policy.FailLocal),
		tenantOf(t, "quiet", policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Minute}, policy.FailLocal)
	var held []*tenantLoad
	for i := range 8 { // alone, the flood borrows the whole decider
		l, ok := a.acquire(flood)
		if !ok {
			t.Fatalf("flood refused at %d in flight of 8", i)
		}
		held = append(held, l)
	}
	if _, ok := a.acquire(flood); ok {
		t.Fatal("flood admitted beyond the bound with its share (all of it) in flight")
	}
	for i := range 4 { // the quiet tenant's share, 8/2, whatever the flood holds
		l, ok := a.acquire(calm)
		if !ok {
			t.Fatalf("quiet tenant refused at %d in flight, within its share of 4", i)
		}
		held = append(held, l)
	}
	if _, ok := a.acquire(calm); ok {
		t.Fatal("quiet tenant admitted beyond its share of a full decider")
	}
	loads := map[string]TenantLoad{}
	for _, l := range a.loads() {
		loads[l.Tenant] = l
	}
	if loads["flood"].InFlight != 8 || loads["flood"].Shed != 1 || loads["quiet"].InFlight != 4 || loads["quiet"].Shed != 1 {
		t.Fatalf("loads %+v", loads)
	}
	for _, l := range held {
		a.release(l)
	}
	if a.total.Load() != 0 || a.active.Load() != 0 {
		t.Fatalf("after every release: %d in flight, %d tenants active", a.total.Load(), a.active.Load())
	}
	if _, ok := a.acquire(calm); !ok {
		t.Fatal("refused on an idle decider")
	}
}

// A decision whose budget runs out queued in the decider (here a budget
// shorter than any queue) is overload: the overload policy answers it by
// the in-process engine at the local share, it is counted, the breaker
// stays closed, and no engine error is counted, although Redis is healthy
// and every rule fails open.
func TestQueuedPastBudgetIsOverloadNotFailure(t *testing.T) {
	t.Parallel()
	rc, prefix := redistest.Client(t)
	eng := redisengine.New(rc, redisengine.Config{Prefix: prefix, Batch: true, BreakerFailures: 5, BreakerCooldown: time.Minute, Logger: quiet()})
	defer eng.Close()
	logs := &logtest.Buffer{}
	d := NewDecider(Options{Counters: eng, Local: limit.NewEngine(limit.EngineConfig{}), LocalShare: 0.5, Budget: time.Nanosecond,
		MaxInFlight: 64, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	c := tenantOf(t, "acme", policy.Params{Algorithm: policy.FixedWindow, Limit: 10, Window: time.Hour}, policy.FailOpen)
	admitted := 0
	for range 20 {
		dec, err := d.Decide(t.Context(), c, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "c1"}}})
		if err != nil {
			t.Fatal(err)
		}
		if !dec.Degraded || dec.Degradation != QueuedPastBudget || dec.Degradation.Reason() != "overload" {
			t.Fatalf("decision %+v, want degraded by overload", dec)
		}
		if r := dec.Rules[0]; r.Limit != 5 || r.Unenforced {
			t.Fatalf("rule answer %+v, want the local engine's count at half of 10", r)
		}
		if dec.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("%d of 20 admitted by the overload policy, want 5 (half of 10, locally)", admitted)
	}
	if st := d.BreakerState(); st != "closed" {
		t.Fatalf("breaker %s after overload alone", st)
	}
	if n := d.EngineErrors(); n != 0 {
		t.Fatalf("%d engine errors counted for overload", n)
	}
	if l := d.Loads(); len(l) != 1 || l[0].Queued != 20 || l[0].InFlight != 0 {
		t.Fatalf("loads %+v, want 20 queued past their budget", l)
	}
	if !strings.Contains(logs.String(), "decider overloaded") {
		t.Fatalf("no log line at the onset of overload:\n%s", logs)
	}
}

// Each overload policy answers as documented, never more loosely than a
// rule's own failure mode: a closed rule stays closed, an open one is
// enforced locally.
func TestOverloadPolicies(t *testing.T) {
	t.Parallel()
	rc, prefix := redistest.Client(t)
	eng := redisengine.New(rc, redisengine.Config{Prefix: prefix, Batch: true, BreakerFailures: 5, BreakerCooldown: time.Minute, Logger: quiet()})
	defer eng.Close()
	for _, tc := range []struct {
		policy   OverloadPolicy
		mode     policy.FailureMode
		admitted int
	}{
		{OverloadLocal, policy.FailOpen, 3},
		{OverloadLocal, policy.FailLocal, 3},
		{OverloadLocal, policy.FailClosed, 0},
		{OverloadFailureMode, policy.FailOpen, 3},
		{OverloadFailureMode, policy.FailLocal, 3},
		{OverloadFailureMode, policy.FailClosed, 0},
		{OverloadReject, policy.FailOpen, 0},
	} {
		d := NewDecider(Options{Counters: eng, Local: limit.NewEngine(limit.EngineConfig{}), Budget: time.Nanosecond,
			Overload: tc.policy, Logger: quiet()})
		c := tenantOf(t, strings.ReplaceAll("t-"+tc.policy.String()+"-"+tc.mode.String(), "_", "-"), policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Hour}, tc.mode)
		admitted := 0
		for range 10 {
			dec, err := d.Decide(t.Context(), c, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "c"}}})
			if err != nil || dec.Degradation != QueuedPastBudget {
				t.Fatalf("%v, rule %v: %+v %v", tc.policy, tc.mode, dec, err)
			}
			if dec.Allowed {
				admitted++
			} else if dec.Rules[0].RetryAfter <= 0 {
				t.Fatalf("%v, rule %v: a rejection without a retry-after: %+v", tc.policy, tc.mode, dec.Rules[0])
			}
		}
		if admitted != tc.admitted {
			t.Errorf("%v, rule %v: %d of 10 admitted, want %d", tc.policy, tc.mode, admitted, tc.admitted)
		}
	}
}

// One tenant flooding a decider of a small bound is shed within its
// share, while another tenant's decisions all go to Redis, in budget, and
// are counted exactly there: never shed, never degraded.
func TestFloodingTenantIsShedWithinItsShare(t *testing.T) {
	t.Parallel()
	rc, prefix := redistest.Client(t)
	// A Redis timeout that a machine loaded by the whole test suite keeps
	// within: the test is of fairness, not of Redis's speed.
	eng := redisengine.New(rc, redisengine.Config{Prefix: prefix, Batch: true, Timeout: 10 * time.Second, BreakerFailures: 5, BreakerCooldown: time.Minute, Logger: quiet()})
	defer eng.Close()
	d := NewDecider(Options{Counters: eng, Local: limit.NewEngine(limit.EngineConfig{}), Budget: 5 * time.Second,
		MaxInFlight: 8, Logger: quiet()})
	flood := tenantOf(t, "flood", policy.Params{Algorithm: policy.TokenBucket, Limit: 1_000_000, Window: time.Second}, policy.FailOpen)
	calm := tenantOf(t, "quiet", policy.Params{Algorithm: policy.TokenBucket, Limit: 5, Window: time.Minute}, policy.FailOpen)

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var flooded, shed atomic.Int64
	for g := range 64 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				dec, err := d.Decide(ctx, flood, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: fmt.Sprintf("f%d-%d", g, i)}}})
				if err != nil {
					return
				}
				flooded.Add(1)
				if dec.Degradation == Shed {
					shed.Add(1)
				}
			}
		})
	}
	// The flood is under way: it has filled the decider once.
	deadline := time.Now().Add(10 * time.Second)
	for shed.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the flood was never shed")
		}
		time.Sleep(time.Millisecond)
	}
	admitted := 0
	for range 20 {
		dec, err := d.Decide(t.Context(), calm, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "q"}}})
		if err != nil {
			t.Fatal(err)
		}
		if dec.Degraded {
			t.Fatalf("the quiet tenant's decision degraded (%s) during the flood", dec.Degradation.Reason())
		}
		if dec.Allowed {
			admitted++
		}
	}
	stop()
	wg.Wait()
	if admitted != 5 {
		t.Fatalf("quiet tenant: %d of 20 admitted during the flood, want 5 (its limit, counted in Redis)", admitted)
	}
	if st := d.BreakerState(); st != "closed" {
		t.Fatalf("breaker %s after a flood", st)
	}
	t.Logf("flood: %d decisions, %d shed", flooded.Load(), shed.Load())
}

// What the overload policy admits with the in-process engine is charged to
// Redis afterwards: a client admitted its whole limit under overload is
// then admitted nothing more by Redis, where the two counts used to add
// up. Algorithms whose states do not add up are not charged; their bound
// is the local share more.
func TestOverloadAdmissionsAreChargedToRedis(t *testing.T) {
	t.Parallel()
	rc, prefix := redistest.Client(t)
	eng := redisengine.New(rc, redisengine.Config{Prefix: prefix, Batch: true, Logger: quiet()})
	t.Cleanup(eng.Close) // after the parallel subtests
	for _, tc := range []struct {
		algorithm policy.Algorithm
		after     int // admitted by Redis once the overload is over
	}{
		{policy.FixedWindow, 0},
		{policy.TokenBucket, 0},
		{policy.GCRA, 0},
		{policy.SlidingWindow, 10}, // not charged
	} {
		t.Run(tc.algorithm.String(), func(t *testing.T) {
			t.Parallel()
			c := tenantOf(t, "charged-"+strings.ReplaceAll(tc.algorithm.String(), "_", "-"),
				policy.Params{Algorithm: tc.algorithm, Limit: 10, Window: time.Hour}, policy.FailLocal)
			over := NewDecider(Options{Counters: eng, Local: limit.NewEngine(limit.EngineConfig{}), Budget: time.Nanosecond, Logger: quiet()})
			req := Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "c"}}}
			admitted := 0
			for range 15 {
				dec, err := over.Decide(t.Context(), c, req)
				if err != nil || dec.Degradation != QueuedPastBudget {
					t.Fatalf("%+v %v, want overload", dec, err)
				}
				if dec.Allowed {
					admitted++
				}
			}
			if admitted != 10 {
				t.Fatalf("the overload policy admitted %d of 15, want 10 (the limit, at a share of 1)", admitted)
			}
			const want = 10 // sent, taken or left out by the engine
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if sent, _ := over.Charges(); sent == want {
					break
				}
				if time.Now().After(deadline) {
					sent, dropped := over.Charges()
					t.Fatalf("%d charges sent, %d dropped; want %d sent", sent, dropped, 10)
				}
			}
			strict := NewDecider(Options{Counters: eng, Budget: 10 * time.Second, Logger: quiet()})
			after := 0
			for range 15 {
				dec, err := strict.Decide(t.Context(), c, req)
				if err != nil || dec.Degraded {
					t.Fatalf("%+v %v, want Redis's answer", dec, err)
				}
				if dec.Allowed {
					after++
				}
			}
			if after != tc.after {
				t.Errorf("Redis admitted %d after the overload, want %d", after, tc.after)
			}
		})
	}
}

// The in-process engine a decider falls back on admits, at an instant, its
// share of what the rule admits at once and no more (at least 1), for
// every algorithm: a fleet of N deciders at a share of 1/N then admits no
// more than N·max(1, ⌊bound/N⌋) between them, as docs/operations.md says.
// A warm-up bucket whose scaled burst falls under its cold factor once
// fell back to the whole rule on each decider.
func TestLocalShareKeepsItsShareOfEveryAlgorithm(t *testing.T) {
	t.Parallel()
	const now = 1_700_000_040_000_000
	c := tenantOf(t, "share", policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Second}, policy.FailLocal)
	for _, p := range enginetest.Params() {
		if p.Limit == policy.MaxLimit {
			continue
		}
		exact := enginetest.AdmitsAtOnce(limit.MustCompile(p), now, 10_000)
		for _, n := range []int64{1, 2, 3, 5, 10} {
			r := &policy.Rule{ID: "r"}
			got := enginetest.AdmitsAtOnce(c.localLimiter(r, p, 1/float64(n)), now, 10_000)
			if want := max(1, exact/n); got > want {
				t.Errorf("%s %+v at a share of 1/%d: admits %d at once, over %d (the rule admits %d)", p.Algorithm, p, n, got, want, exact)
			}
		}
	}
}
