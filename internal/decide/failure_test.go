package decide

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestFailureModesWhenRedisHangs freezes a real Redis under a decider:
// every decision still returns within its budget, each rule answers by its
// failure mode, the breaker opens so later decisions do not wait, no
// goroutines pile up, and service returns once Redis does.
//
// Not parallel: it counts the process's goroutines.
func TestFailureModesWhenRedisHangs(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t)
	// The engine as the decider opens it: reads that poll, on a Redis
	// that stops answering.
	eng, err := redisengine.Open("redis://"+srv.Addr+"?max_retries=-1&pool_size=4", redisengine.ClientOptions{Spin: redisengine.LowLatencySpin},
		redisengine.Config{Prefix: redistest.Prefix(t), BreakerFailures: 3, BreakerCooldown: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rule := func(name, route string, mode policy.FailureMode, limit int64) policy.Rule {
		return policy.Rule{ID: name, Name: name, Match: []policy.Match{{Key: "route", Value: route}}, KeyBy: []string{"client_id"},
			FailureMode: mode, Enabled: true, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: limit, Window: time.Hour}}
	}
	c, err := Compile(&policy.Snapshot{
		Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{
			rule("open", "/open", policy.FailOpen, 2), rule("closed", "/closed", policy.FailClosed, 2), rule("local", "/local", policy.FailLocal, 4),
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	const budget = 100 * time.Millisecond
	d := NewDecider(Options{Counters: eng, Local: limit.NewEngine(limit.EngineConfig{}), LocalShare: 0.5,
		Budget: budget})
	check := func(route string) Decision {
		t.Helper()
		start := time.Now()
		dec, err := d.Decide(ctx, c, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "c1"}, {Key: "route", Value: route}}})
		if err != nil {
			t.Fatalf("%s: %v", route, err)
		}
		// The budget, not Redis's timeouts (seconds), bounds a decision.
		if took := time.Since(start); took > budget+time.Second {
			t.Fatalf("%s took %v with a budget of %v", route, took, budget)
		}
		return dec
	}
	// Each answer while Redis is frozen says why and what was enforced:
	// an open rule nothing (unenforced), a closed one a rejection, a local
	// one the in-process engine's count at half its limit.
	enforced := map[string]func(r RuleResult) bool{
		"/open":   func(r RuleResult) bool { return r.Unenforced && r.Allowed },
		"/closed": func(r RuleResult) bool { return !r.Unenforced && !r.Allowed && r.RetryAfter == time.Second },
		"/local":  func(r RuleResult) bool { return !r.Unenforced && r.Limit == 2 && r.Remaining >= 0 && r.Remaining < 2 },
	}
	count := func(route string, n int) (admitted int, degraded bool) {
		for range n {
			dec := check(route)
			if dec.Allowed {
				admitted++
			}
			degraded = dec.Degraded
			switch {
			case !dec.Degraded && dec.Degradation != NotDegraded:
				t.Fatalf("%s: %+v: a degradation without degraded", route, dec)
			case dec.Degraded && dec.Degradation != StoreUnavailable:
				t.Fatalf("%s: degraded by %q with Redis frozen, want store_unavailable", route, dec.Degradation.Reason())
			case dec.Degraded && !enforced[route](dec.Rules[0]):
				t.Fatalf("%s: degraded answer %+v does not say what was enforced", route, dec.Rules[0])
			}
		}
		return admitted, degraded
	}
	if n, deg := count("/open", 3); n != 2 || deg {
		t.Fatalf("healthy: %d of 3 admitted (degraded %v), want 2 through Redis", n, deg)
	}

	goroutines := runtime.NumGoroutine()
	srv.Pause(t)
	if n, deg := count("/open", 5); n != 5 || !deg {
		t.Fatalf("open rule with Redis frozen: %d of 5 admitted (degraded %v)", n, deg)
	}
	if d.EngineErrors() == 0 {
		t.Fatal("no engine error counted while Redis hung")
	}
	if d.BreakerState() != "open" {
		t.Fatalf("breaker %s after repeated failures, want open", d.BreakerState())
	}
	own := Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "c1"}, {Key: "route", Value: "/closed"}},
		Limit: &RequestLimit{Requests: 1, Window: time.Hour}}
	if dec, err := d.Decide(ctx, c, own); err != nil || !dec.Allowed || !dec.Degraded {
		t.Fatalf("a request's own limit with Redis frozen: %+v %v, want admitted: it fails open", dec, err)
	}
	if n, _ := count("/closed", 4); n != 0 {
		t.Fatalf("closed rule with Redis frozen: %d admitted", n)
	}
	if n, _ := count("/local", 6); n != 2 {
		t.Fatalf("local rule at half of 4: %d of 6 admitted, want 2", n)
	}
	if g := runtime.NumGoroutine(); g > goroutines+10 {
		t.Fatalf("goroutines grew from %d to %d during the outage", goroutines, g)
	}

	srv.Resume(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if dec := check("/closed"); !dec.Degraded {
			if !dec.Allowed {
				t.Fatalf("after recovery: %+v, want admitted by Redis", dec)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never back to normal after Redis returned")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Under load from 50 concurrent clients, a frozen Redis neither slows
// decisions beyond their budget nor piles up goroutines.
//
// Not parallel: it counts the process's goroutines.
func TestRedisFrozenUnderLoad(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t)
	eng, err := redisengine.Open("redis://"+srv.Addr+"?max_retries=-1&pool_size=16", redisengine.ClientOptions{Spin: redisengine.LowLatencySpin},
		redisengine.Config{Prefix: redistest.Prefix(t), Batch: true, BreakerFailures: 5, BreakerCooldown: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{{ID: "r", Name: "r", KeyBy: []string{"client_id"}, Enabled: true,
			FailureMode: policy.FailOpen, Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 1_000_000, Window: time.Second}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	const budget = 100 * time.Millisecond
	d := NewDecider(Options{Counters: eng, Budget: budget})
	load := func() (slowest time.Duration, degraded int64) {
		var mu sync.Mutex
		var deg, unavailable atomic.Int64
		var wg sync.WaitGroup
		for g := range 50 {
			wg.Go(func() {
				for i := range 20 {
					start := time.Now()
					dec, err := d.Decide(ctx, c, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: fmt.Sprintf("c%d-%d", g, i)}}})
					took := time.Since(start)
					if err != nil || !dec.Allowed {
						t.Errorf("decision: %+v %v", dec, err)
					}
					if dec.Degraded {
						deg.Add(1)
						// Nothing counted an open rule: its answer says so.
						if !dec.Rules[0].Unenforced {
							t.Errorf("a degraded answer of an open rule %+v, want it unenforced", dec.Rules[0])
						}
					}
					if dec.Degradation == StoreUnavailable {
						unavailable.Add(1)
					}
					mu.Lock()
					slowest = max(slowest, took)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if deg.Load() > 0 && unavailable.Load() == 0 {
			t.Error("no decision said store_unavailable while Redis was frozen")
		}
		return slowest, deg.Load()
	}
	if _, deg := load(); deg != 0 {
		t.Fatalf("%d degraded decisions with Redis up", deg)
	}
	goroutines := runtime.NumGoroutine()
	srv.Pause(t)
	slowest, deg := load()
	if slowest > budget+time.Second {
		t.Fatalf("a decision took %v with a budget of %v", slowest, budget)
	}
	if deg != 1000 {
		t.Fatalf("%d of 1000 decisions degraded while Redis was frozen", deg)
	}
	if g := runtime.NumGoroutine(); g > goroutines+20 {
		t.Fatalf("goroutines grew from %d to %d", goroutines, g)
	}
	srv.Resume(t)
}

// A rule counted locally (a sync interval) keeps deciding on its view
// through a Redis outage for two intervals, undegraded; after that it
// follows its failure mode like a strict rule, within the budget although
// Redis hangs.
func TestLocallyCountedRuleThroughARedisOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer client.Close()
	now := time.UnixMicro(1_700_000_040_000_000)
	clock := func() time.Time { return now }
	eng := redisengine.New(client, redisengine.Config{Prefix: redistest.Prefix(t), SyncTick: -1, Now: clock})
	defer eng.Close()
	c, err := Compile(&policy.Snapshot{
		Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{{ID: "r", Name: "r", KeyBy: []string{"client_id"},
			FailureMode: policy.FailClosed, Enabled: true, Sync: 100 * time.Millisecond,
			Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 100, Window: time.Second}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecider(Options{Counters: eng, Budget: 100 * time.Millisecond, Now: clock})
	check := func() Decision {
		t.Helper()
		dec, err := d.Decide(ctx, c, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "c1"}}})
		if err != nil {
			t.Fatal(err)
		}
		return dec
	}
	if dec := check(); !dec.Allowed || dec.Degraded {
		t.Fatalf("with Redis up: %+v", dec)
	}
	srv.Pause(t)
	now = now.Add(150 * time.Millisecond)
	if dec := check(); !dec.Allowed || dec.Degraded {
		t.Fatalf("Redis down, the view 150 ms old: %+v, want decided locally", dec)
	}
	now = now.Add(100 * time.Millisecond)
	start := time.Now()
	if dec := check(); dec.Allowed || !dec.Degraded {
		t.Fatalf("Redis down, the view 250 ms old: %+v, want the closed failure mode", dec)
	}
	if took := time.Since(start); took > time.Second { // the budget is 100 ms; Redis's own timeouts, seconds
		t.Fatalf("the decision took %v", took)
	}
}

// One master of a Redis Cluster dies: the decisions whose counters it held
// answer by their failure modes, and its breaker opens so that they stop
// waiting for it, while the other masters' decisions go on through Redis,
// exact and never degraded: each master has a breaker of its own. A
// decision spanning a live master and the dead one (two rules keyed by
// different descriptors) fails on the dead one and counts against its
// breaker alone. (The cluster keeps serving the other slots:
// cluster-require-full-coverage no; the others' decisions are checked after
// it has declared the master failed.)
func TestOneClusterMasterDownLeavesTheOthersDeciding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartCluster(t)
	// The others keep serving once the cluster has declared the master
	// failed (by default every node refuses every slot then).
	cl.Set(t, "cluster-require-full-coverage", "no")
	eng, err := redisengine.Open("redis://"+cl.Addrs[0]+"?addr="+cl.Addrs[1]+"&addr="+cl.Addrs[2], redisengine.ClientOptions{Cluster: true},
		redisengine.Config{Prefix: redistest.Prefix(t), BreakerFailures: 3, BreakerCooldown: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rule := policy.Rule{ID: "r", Name: "r", KeyBy: []string{"client_id"}, FailureMode: policy.FailOpen,
		Enabled: true, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Hour}}
	// Requests with a route also meet a rule counting each route.
	perRoute := policy.Rule{ID: "g", Name: "g", Match: []policy.Match{{Key: "route", Value: policy.AnyValue}}, KeyBy: []string{"route"},
		FailureMode: policy.FailOpen, Enabled: true, Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1000, Window: time.Hour}}
	c, err := Compile(&policy.Snapshot{
		Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{rule, perRoute}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A budget that a busy machine (-race) keeps within; the dead master
	// refuses connections at once.
	d := NewDecider(Options{Counters: eng, Budget: time.Second})
	masterOf := func(r *policy.Rule, ds policy.Descriptors) int {
		first, _ := eng.Shards(ctx, []limit.Request{{Key: string(policy.AppendCounterKey(nil, "t", r, ds))}})
		return slices.Index(cl.Addrs, first)
	}
	// Clients on each master, by where their counters' keys fall, and
	// one more on the second for the decisions spanning two masters.
	var req [3][]Request
	var spanning Request
	for i := 0; len(req[0]) < 2 || len(req[1]) < 2 || len(req[2]) < 2 || spanning.Descriptors == nil; i++ {
		ds := policy.Descriptors{{Key: "client_id", Value: fmt.Sprint("client-", i)}}
		switch m := masterOf(&rule, ds); {
		case len(req[m]) < 2:
			req[m] = append(req[m], Request{Descriptors: ds})
		case m == 1 && spanning.Descriptors == nil:
			spanning.Descriptors = ds
		}
	}
	for i := 0; len(spanning.Descriptors) == 1; i++ {
		route := policy.Descriptor{Key: "route", Value: fmt.Sprint("/route-", i)}
		if masterOf(&perRoute, policy.Descriptors{route}) == 0 {
			spanning.Descriptors = append(spanning.Descriptors, route)
		}
	}
	decide := func(r Request) Decision {
		t.Helper()
		dec, err := d.Decide(ctx, c, r)
		if err != nil {
			t.Fatal(err)
		}
		return dec
	}
	for _, r := range req[1] {
		decide(r) // one counted before the master dies
	}
	cl.Servers[0].Stop(t)

	before := d.EngineErrors()
	for range 10 {
		if dec := decide(spanning); !dec.Allowed || dec.Degradation != StoreUnavailable || !dec.Rules[0].Unenforced {
			t.Fatalf("a decision spanning the dead master: %+v; want its rules' failure mode (open, unenforced)", dec)
		}
		for _, r := range req[0] {
			if dec := decide(r); !dec.Allowed || dec.Degradation != StoreUnavailable || !dec.Rules[0].Unenforced {
				t.Fatalf("a client of the dead master: %+v; want its rule's failure mode (open, unenforced)", dec)
			}
		}
	}
	if n := d.EngineErrors() - before; n != 3 {
		t.Fatalf("%d calls to the dead master failed, want 3: then its breaker is open and none is made", n)
	}
	if st := d.BreakerState(); st != "open" {
		t.Fatalf("breaker state %q, want open", st)
	}
	// Once the others have declared it failed.
	other := redis.NewClient(&redis.Options{Addr: cl.Addrs[1]})
	defer other.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if nodes, err := other.ClusterNodes(ctx).Result(); err == nil && strings.Contains(nodes, cl.Addrs[0]) && strings.Contains(nodes, "master,fail ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster never declared the dead master failed")
		}
	}
	for m := 1; m < 3; m++ {
		for _, r := range req[m] {
			var allowed []bool
			for range 4 {
				dec := decide(r)
				if dec.Degraded {
					t.Fatalf("a client of a live master decided by its failure mode")
				}
				allowed = append(allowed, dec.Allowed)
			}
			want := []bool{true, true, true, false}
			if m == 1 {
				want = []bool{true, true, false, false} // one counted before
			}
			if !slices.Equal(allowed, want) {
				t.Fatalf("a client of master %d: %v, want %v", m, allowed, want)
			}
		}
	}
}

// A request's own limit counts by the algorithm it names on Redis as in
// process (TestRequestLimitAlgorithms): a token bucket and GCRA refill as
// time passes, the fixed window waits for its next window.
func TestRequestLimitAlgorithmsOnRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client, prefix := redistest.Client(t)
	var mu sync.Mutex
	now := time.UnixMicro(1_699_999_200_000_000) // an hour's start (the fixed window's)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	eng := redisengine.New(client, redisengine.Config{Prefix: prefix, Now: clock})
	defer eng.Close()
	c, err := Compile(snapshot())
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecider(Options{Counters: eng, Budget: time.Second, Now: clock})
	admit := func(alg policy.Algorithm, n int) int {
		t.Helper()
		ok := 0
		for range n {
			dec, err := d.Decide(ctx, c, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "ann"}},
				Limit: &RequestLimit{Requests: 2, Window: time.Hour, Algorithm: alg}})
			if err != nil || dec.Degraded {
				t.Fatalf("%v: %+v %v", alg, dec, err)
			}
			if dec.Allowed {
				ok++
			}
		}
		return ok
	}
	algs := []policy.Algorithm{policy.FixedWindow, policy.TokenBucket, policy.GCRA, policy.SlidingWindow}
	for _, alg := range algs {
		if got := admit(alg, 3); got != 2 {
			t.Fatalf("%v: %d of 3 admitted, want 2", alg, got)
		}
	}
	mu.Lock()
	now = now.Add(30 * time.Minute)
	mu.Unlock()
	for alg, want := range map[policy.Algorithm]int{policy.FixedWindow: 0, policy.TokenBucket: 1, policy.GCRA: 1} {
		if got := admit(alg, 2); got != want {
			t.Fatalf("%v half an hour on: %d of 2 admitted, want %d", alg, got, want)
		}
	}
}

// Leases through a Redis outage: a concurrency rule failing to local
// takes its leases on the in-process engine, ReleaseHeld ends them there
// without asking Redis, and once the breaker is open a release does not
// ask Redis either (its leases end at their TTL).
func TestLeasesThroughARedisOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}) // nothing listens: refused
	t.Cleanup(func() { _ = down.Close() })
	d := NewDecider(Options{Counters: redisengine.New(down, redisengine.Config{Prefix: redistest.Prefix(t), BreakerFailures: 2, BreakerCooldown: time.Hour}),
		Local: limit.NewEngine(limit.EngineConfig{}), LocalShare: 0.5, Budget: time.Second})
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{{ID: "c", Name: "in-flight", KeyBy: []string{"client_id"}, FailureMode: policy.FailLocal,
			Enabled: true, Params: policy.Params{Algorithm: policy.Concurrency, Limit: 2, LeaseTTL: time.Hour}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "a"}}}
	first := mustDecide(t, d, c, req)
	if !first.Allowed || !first.Degraded || first.Lease == 0 {
		t.Fatalf("the first check, Redis down: %+v", first)
	}
	if dec := mustDecide(t, d, c, req); dec.Allowed { // one lease here: half of 2
		t.Fatalf("a second lease past the local share: %+v", dec)
	}
	errs := d.EngineErrors()
	if d.BreakerState() != "open" {
		t.Fatalf("breaker %s after %d failures", d.BreakerState(), errs)
	}
	if err := d.ReleaseHeld(ctx, c, req, first); err != nil || d.EngineErrors() != errs {
		t.Fatalf("ReleaseHeld of a lease taken locally: %v, %d engine errors (was %d)", err, d.EngineErrors(), errs)
	}
	if dec := mustDecide(t, d, c, req); !dec.Allowed {
		t.Fatalf("after the release: %+v", dec)
	}
	if err := d.Release(ctx, c, Request{Descriptors: req.Descriptors, Lease: 7}); err == nil || d.EngineErrors() != errs {
		t.Fatalf("a release with the breaker open: %v, %d engine errors (was %d): Redis was asked", err, d.EngineErrors(), errs)
	}
}

// A closed rule admits nothing that Redis did not decide while Redis is
// killed or frozen under load from many callers, with the decider's
// defaults (a batching engine, a 50 ms budget, a Redis timeout of 500 ms),
// under either overload policy that fails no rule closed by itself (local,
// failure_mode). Until the first pipeline fails (the Redis
// timeout), a decision whose budget runs out is overload, answered by the
// overload policy, which keeps a closed rule closed; from then on the
// decisions that wait behind a pipeline Redis does not answer are store
// trouble, answered by the rule's failure mode, never overload. Once Redis
// is back, decisions go to it again.
//
// Not parallel: its Redis is frozen for seconds.
func TestClosedRuleStaysClosedThroughAnOutageUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		outage   string
		overload OverloadPolicy
	}{{"killed", OverloadLocal}, {"frozen", OverloadLocal}, {"killed", OverloadFailureMode}, {"frozen", OverloadFailureMode}} {
		outage := tc.outage
		t.Run(outage+"/"+tc.overload.String(), func(t *testing.T) {
			srv := redistest.StartServer(t)
			eng, err := redisengine.Open("redis://"+srv.Addr+"?max_retries=-1&pool_size=16", redisengine.ClientOptions{Spin: redisengine.LowLatencySpin},
				redisengine.Config{Prefix: redistest.Prefix(t), Batch: true, BreakerFailures: 5, BreakerCooldown: time.Second, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			c := tenantOf(t, "closed", policy.Params{Algorithm: policy.FixedWindow, Limit: 1_000_000, Window: time.Hour}, policy.FailClosed)
			d := NewDecider(Options{Counters: eng, Local: limit.NewEngine(limit.EngineConfig{}), Budget: 50 * time.Millisecond,
				MaxInFlight: DefaultMaxInFlight, Overload: tc.overload, Logger: quiet()})

			var down atomic.Int64 // unix ns Redis went down at; 0 while up
			var admittedDown, overload, unavailable, decided atomic.Int64
			ctx, stop := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			for g := range 50 {
				wg.Go(func() {
					for i := 0; ctx.Err() == nil; i++ {
						start := time.Now().UnixNano()
						dec, err := d.Decide(ctx, c, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: fmt.Sprintf("c%d-%d", g, i)}}})
						if err != nil {
							return
						}
						decided.Add(1)
						switch dec.Degradation {
						case QueuedPastBudget, Shed:
							// Once Redis has failed a pipeline (a second is
							// twice its timeout), no decision is overload
							// until it is back; recovery's burst may be.
							if at := down.Load(); at != 0 && start > at+int64(time.Second) {
								overload.Add(1)
							}
						case StoreUnavailable:
							unavailable.Add(1)
						}
						// A decision begun once Redis was down cannot have been
						// made by Redis: admitting it would be the overload
						// policy's doing, or an open door.
						if at := down.Load(); at != 0 && start > at && dec.Allowed {
							admittedDown.Add(1)
						}
					}
				})
			}
			waitFor := func(what string, cond func() bool) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for !cond() {
					if time.Now().After(deadline) {
						stop()
						wg.Wait()
						t.Fatalf("never %s", what)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			waitFor("decided", func() bool { return decided.Load() > 200 })
			if outage == "killed" {
				srv.Stop(t)
			} else {
				srv.Pause(t)
			}
			// From now on nothing Redis could answer: a decision begun
			// before may have been decided by it.
			down.Store(time.Now().UnixNano())
			waitFor("degraded by the outage", func() bool { return unavailable.Load() > 100 })
			time.Sleep(3 * time.Second) // the outage lasts: breakers open, probe and open again
			down.Store(0)               // what follows is recovery: Redis may answer any moment
			if outage == "killed" {
				srv.Start(t)
			} else {
				srv.Resume(t)
			}
			var undegraded atomic.Int64
			waitFor("back to Redis", func() bool {
				dec, err := d.Decide(t.Context(), c, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "probe"}}})
				if err == nil && !dec.Degraded {
					undegraded.Add(1)
				}
				return undegraded.Load() > 0
			})
			stop()
			wg.Wait()
			if n := admittedDown.Load(); n != 0 {
				t.Errorf("a closed rule admitted %d decisions begun while Redis was %s", n, outage)
			}
			if n := overload.Load(); n != 0 {
				t.Errorf("%d decisions said overload while Redis was %s under a load the decider serves", n, outage)
			}
			t.Logf("%d decided, %d store_unavailable", decided.Load(), unavailable.Load())
		})
	}
}
