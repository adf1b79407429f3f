package decide

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// countingEngine counts the calls that reach the in-process counters.
type countingEngine struct {
	InProcess
	calls atomic.Int64
}

func (e *countingEngine) AllowBatch(ctx context.Context, budget time.Duration, batch []limit.Call) {
	e.calls.Add(int64(len(batch)))
	e.InProcess.AllowBatch(ctx, budget, batch)
}

// countingDecider is a Decider configured by o on a countingEngine, both
// on a clock the test moves.
func countingDecider(o Options) (*Decider, *countingEngine, *clock) {
	clk := &clock{t: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	eng := &countingEngine{InProcess: InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: clk.now}}
	o.Counters, o.Now = eng, clk.now
	return NewDecider(o), eng, clk
}

// mustDecide is d.Decide, failing the test on an error.
func mustDecide(t *testing.T, d *Decider, c *Compiled, req Request) Decision {
	t.Helper()
	dec, err := d.Decide(context.Background(), c, req)
	if err != nil {
		t.Fatal(err)
	}
	return dec
}

func TestDenyCacheAnswersUntilTheRejectionEnds(t *testing.T) {
	t.Parallel()
	d, eng, clk := countingDecider(Options{DenyCacheSize: 100})
	rules := []policy.Rule{
		{ID: "w", Name: "window", Match: []policy.Match{{Key: "route", Value: "/w"}}, KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Minute}},
		{ID: "c", Name: "leases", Match: []policy.Match{{Key: "route", Value: "/c"}}, KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.Concurrency, Limit: 1, LeaseTTL: time.Minute}},
	}
	snap := &policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: rules}}}
	c, err := Compile(snap)
	if err != nil {
		t.Fatal(err)
	}
	req := func(route string, cost int64) Request {
		return Request{Cost: cost, Lease: int64(eng.calls.Load()), Descriptors: policy.Descriptors{{Key: "client_id", Value: "a"}, {Key: "route", Value: route}}}
	}
	decide := func(c *Compiled, r Request) Decision { return mustDecide(t, d, c, r) }
	decide(c, req("/w", 1)) // 1 of 2
	if dec := decide(c, req("/w", 2)); dec.Allowed || dec.Cached || eng.calls.Load() != 2 {
		t.Fatalf("cost 2 over a limit of 2 with 1 used: %+v", dec)
	}
	// The rejection of cost 2 says nothing about cost 1: the engine answers.
	if dec := decide(c, req("/w", 1)); !dec.Allowed || eng.calls.Load() != 3 {
		t.Fatalf("cost 1 after a cached cost-2 rejection: %+v", dec)
	}
	if dec := decide(c, req("/w", 1)); dec.Allowed || dec.Cached || eng.calls.Load() != 4 {
		t.Fatalf("limit reached: %+v", dec)
	}
	clk.t = clk.t.Add(20 * time.Second)
	dec := decide(c, req("/w", 1))
	if dec.Allowed || !dec.Cached || eng.calls.Load() != 4 || dec.Rules[0].RetryAfter != 40*time.Second {
		t.Fatalf("within the window: %+v, %d engine calls; want a cached rejection for 40s more", dec, eng.calls.Load())
	}
	// A new config version starts afresh.
	snap.Version = 2
	c2, _ := Compile(snap)
	if dec := decide(c2, req("/w", 1)); dec.Cached || eng.calls.Load() != 5 {
		t.Fatalf("new version answered from the cache: %+v", dec)
	}
	clk.t = clk.t.Add(40 * time.Second)
	if dec := decide(c, req("/w", 1)); !dec.Allowed || eng.calls.Load() != 6 {
		t.Fatalf("after the window: %+v", dec)
	}
	// Concurrency rejections are never cached: a lease may end early.
	decide(c, req("/c", 1))
	decide(c, req("/c", 1))
	n := eng.calls.Load()
	if dec := decide(c, req("/c", 1)); dec.Cached || eng.calls.Load() != n+1 {
		t.Fatalf("a concurrency rejection was cached: %+v", dec)
	}
}

// A check naming no lease takes a lease of its own on a concurrency rule,
// which Decision.Lease names for Release; a rejected check or a peek holds
// none, and a named lease is the one held.
func TestChecksNamingNoLeaseTakeTheirOwn(t *testing.T) {
	t.Parallel()
	d, _, _ := countingDecider(Options{})
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{
			{ID: "w", Name: "window", KeyBy: []string{"client_id"}, Enabled: true,
				Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 100, Window: time.Minute}},
			{ID: "c", Name: "leases", KeyBy: []string{"client_id"}, Enabled: true,
				Params: policy.Params{Algorithm: policy.Concurrency, Limit: 2, LeaseTTL: time.Minute}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "a"}}}
	if dec := mustDecide(t, d, c, Request{Descriptors: req.Descriptors, Peek: true}); !dec.Allowed || dec.Lease != 0 {
		t.Fatalf("a peek: %+v", dec)
	}
	one, two := mustDecide(t, d, c, req), mustDecide(t, d, c, req)
	if !one.Allowed || !two.Allowed || one.Lease == 0 || two.Lease == 0 || one.Lease == two.Lease || one.Lease >= 1<<53 {
		t.Fatalf("two checks naming no lease: leases %d and %d, allowed %v %v", one.Lease, two.Lease, one.Allowed, two.Allowed)
	}
	if dec := mustDecide(t, d, c, req); dec.Allowed || dec.Lease != 0 {
		t.Fatalf("a third of a limit of 2: %+v", dec)
	}
	if err := d.Release(context.Background(), c, Request{Descriptors: req.Descriptors, Lease: one.Lease}); err != nil {
		t.Fatal(err)
	}
	if dec := mustDecide(t, d, c, Request{Descriptors: req.Descriptors, Lease: 42}); !dec.Allowed || dec.Lease != 42 {
		t.Fatalf("a named lease after a release: %+v", dec)
	}
	if dec := mustDecide(t, d, c, Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "b"}}, Limit: &RequestLimit{Requests: 5, Window: time.Minute}}); dec.Lease != 0 {
		t.Fatalf("a check by its own limit took lease %d", dec.Lease)
	}
}
