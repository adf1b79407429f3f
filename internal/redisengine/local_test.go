package redisengine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// manualClock is a clock the test moves.
type manualClock struct{ us atomic.Int64 }

func (c *manualClock) Now() time.Time          { return time.UnixMicro(c.us.Load()) }
func (c *manualClock) advance(d time.Duration) { c.us.Add(d.Microseconds()) }

func newClock() *manualClock {
	c := &manualClock{}
	c.us.Store(1_700_000_040_000_000)
	return c
}

// commands counts the commands a client sends, pipelined or not.
type commands struct{ n atomic.Int64 }

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if name := cmd.Name(); name == "evalsha" || name == "eval" {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// localDeciders returns n engines on the local Redis sharing a prefix and
// the clock, reconciled by hand (SyncTick < 0), and a counter of the
// script calls they make.
func localDeciders(t *testing.T, n int, clk *manualClock, batch bool) ([]*Engine, *commands) {
	t.Helper()
	_, prefix := redistest.Client(t)
	counted := &commands{}
	out := make([]*Engine, n)
	for i := range out {
		c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
		c.AddHook(counted)
		t.Cleanup(func() { c.Close() })
		out[i] = New(c, Config{Prefix: prefix, MinTTL: testTTL, Batch: batch, SyncTick: -1, Now: clk.Now})
		t.Cleanup(out[i].Close)
	}
	return out, counted
}

// throwawayDecider returns an engine reconciled by hand on a private
// redis-server the test may stop or pause, its client made with opts, and
// its clock.
func throwawayDecider(t *testing.T, opts redis.Options) (*Engine, *redistest.Server, *manualClock) {
	t.Helper()
	srv := redistest.StartServer(t)
	clk := newClock()
	opts.Addr = srv.Addr
	c := redis.NewClient(&opts)
	t.Cleanup(func() { c.Close() })
	e := New(c, Config{MinTTL: testTTL, SyncTick: -1, Now: clk.Now})
	t.Cleanup(e.Close)
	return e, srv, clk
}

func decideOne(t *testing.T, e *Engine, rq limit.Request) (bool, limit.Result) {
	t.Helper()
	res := make([]limit.Result, 1)
	ok, err := e.AllowAll(context.Background(), []limit.Request{rq}, res)
	if err != nil {
		t.Fatal(err)
	}
	return ok, res[0]
}

var (
	bucket10 = limit.MustCompile(policy.Params{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Second})
	window10 = limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 10, Window: time.Second})
)

// One decider counting locally, one unit at a time, never admits more
// than strict counting would (the shared state records local admissions
// when they reach it, so it can only overstate a debt; with costs of
// several units the bound is the algorithm's, the next test), answers a
// fixed window exactly, makes no
// Redis call between reconciliations after a key's first, and leaves in
// Redis what it admitted.
func TestLocalCountingOnOneDecider(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		for _, lim := range []*limit.Limiter{bucket10, window10} {
			t.Run(fmt.Sprintf("%s/batch=%v", lim.Algorithm(), batch), func(t *testing.T) {
				clk := newClock()
				es, calls := localDeciders(t, 1, clk, batch)
				e := es[0]
				local := limit.Request{Key: "{k}", Limiter: lim, Cost: 1, Sync: 100 * time.Millisecond}
				var ref limit.State
				var got, want int
				for step := range 40 {
					for range 3 {
						ok, r := decideOne(t, e, local)
						var w limit.Result
						ref, w = lim.Eval(ref, limit.Args{Now: clk.us.Load(), Cost: 1}, nil)
						if ok {
							got++
						}
						if w.Allowed {
							want++
						}
						if lim == window10 && (ok != w.Allowed || r.Remaining != w.Remaining) {
							t.Fatalf("step %d: local answer %v %+v, the algorithm's %+v", step, ok, r, w)
						}
						if got > want {
							t.Fatalf("step %d: %d admitted locally, strict counting admits %d", step, got, want)
						}
					}
					clk.advance(50 * time.Millisecond)
					if step%2 == 1 {
						e.Reconcile(context.Background())
					}
				}
				// What an idle bucket refills between an admission and its
				// reconciliation is lost: here once, at the start.
				if got < want-1 {
					t.Errorf("%d admitted locally, strict counting admits %d", got, want)
				}
				// 40 steps, 20 reconciliations: one fetch and one call each.
				if n := calls.n.Load(); n != 21 {
					t.Errorf("%d script calls for 120 decisions, want 21 (the first fetch, then one per reconciliation)", n)
				}
				// A strict decision sees what was counted locally.
				strict := local
				strict.Sync, strict.Cost = 0, 0
				_, r := decideOne(t, e, strict)
				var view limit.Result
				lim.Step(&e.local.shards[e.local.shardOf("{k}")].m["{k}"].view, limit.Args{Now: clk.us.Load()}, nil, &view)
				if r.Remaining != view.Remaining {
					t.Fatalf("strict decision after reconciling: %+v, the local view %+v", r, view)
				}
			})
		}
	}
}

// Three deciders each admit a full burst from their own views before they
// reconcile: the overshoot local counting allows. The shared debt then
// holds all three bursts, and no decider admits anything until it has
// drained to the rate: over the whole run the meter admits what strict
// counting would plus that one overshoot, not more.
func TestLocalCountingOvershootIsPaidBack(t *testing.T) {
	t.Parallel()
	clk := newClock()
	es, _ := localDeciders(t, 3, clk, true)
	rq := limit.Request{Key: "{shared}", Limiter: bucket10, Cost: 1, Sync: 100 * time.Millisecond}
	admitted := 0
	for _, e := range es {
		for range 15 {
			if ok, _ := decideOne(t, e, rq); ok {
				admitted++
			}
		}
	}
	if admitted != 30 {
		t.Fatalf("three fresh views admitted %d, want 3 bursts of 10", admitted)
	}
	clk.advance(100 * time.Millisecond)
	for _, e := range es {
		e.Reconcile(context.Background())
	}
	// The shared debt is 30 units (3 s) from when it was recorded, 100 ms
	// after the start; a unit is admitted again once the debt is back within
	// the burst, 2.1 s later.
	for clk.us.Load() < 1_700_000_040_000_000+2_200_000 {
		for i, e := range es {
			if ok, r := decideOne(t, e, rq); ok {
				t.Fatalf("decider %d admitted at +%dms while paying back the overshoot: %+v", i, (clk.us.Load()-1_700_000_040_000_000)/1000, r)
			}
		}
		clk.advance(100 * time.Millisecond)
		for _, e := range es {
			e.Reconcile(context.Background())
		}
	}
	clk.advance(100 * time.Millisecond)
	ok, _ := decideOne(t, es[0], rq)
	if !ok {
		t.Fatal("nothing admitted once the debt had drained")
	}
}

// The fixed window's overshoot stays within its window: the next window
// starts from zero on every decider.
func TestLocalCountingFixedWindowOvershoot(t *testing.T) {
	t.Parallel()
	clk := newClock() // on a window boundary
	es, _ := localDeciders(t, 2, clk, false)
	rq := limit.Request{Key: "{w}", Limiter: window10, Cost: 1, Sync: 100 * time.Millisecond}
	count := func() (n int) {
		for _, e := range es {
			for range 12 {
				if ok, _ := decideOne(t, e, rq); ok {
					n++
				}
			}
		}
		return n
	}
	if n := count(); n != 20 {
		t.Fatalf("two fresh views admitted %d, want 2 windows' worth of 10", n)
	}
	clk.advance(100 * time.Millisecond)
	for _, e := range es {
		e.Reconcile(context.Background())
	}
	if n := count(); n != 0 {
		t.Fatalf("admitted %d after reconciling a full window", n)
	}
	clk.advance(900 * time.Millisecond) // the next window
	for _, e := range es {
		e.Reconcile(context.Background())
	}
	if n := count(); n != 20 {
		t.Fatalf("the next window admitted %d, want 20", n)
	}
}

// A decision of a local rule and a strict one is all or nothing: when the
// strict rule rejects, the local one gives back what it took, and when the
// local one rejects, the strict one consumes nothing.
func TestLocalAndStrictRulesTogether(t *testing.T) {
	t.Parallel()
	clk := newClock()
	es, _ := localDeciders(t, 1, clk, true)
	e := es[0]
	tight := limit.MustCompile(policy.Params{Algorithm: policy.GCRA, Limit: 3, Window: time.Second})
	local := limit.Request{Key: "{c}local", Limiter: bucket10, Cost: 1, Sync: 100 * time.Millisecond}
	strict := limit.Request{Key: "{c}strict", Limiter: tight, Cost: 1}
	res := make([]limit.Result, 2)
	admitted := 0
	for range 8 {
		ok, err := e.AllowAll(context.Background(), []limit.Request{local, strict}, res)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d decisions; the strict rule allows 3", admitted)
	}
	if res[0].Remaining != 7 {
		t.Fatalf("the local rule answers %d remaining after 3 admitted decisions, want 7: rejected ones were not given back", res[0].Remaining)
	}
	clk.advance(100 * time.Millisecond)
	e.Reconcile(context.Background())
	_, r := decideOne(t, e, limit.Request{Key: local.Key, Limiter: bucket10})
	if r.Remaining != 7 {
		t.Fatalf("the shared state holds %d remaining, want 7", r.Remaining)
	}
	// The local rule rejects: the strict one is not charged.
	clk.advance(time.Second) // the strict rule refills
	for range 20 {
		decideOne(t, e, local)
	}
	ok, err := e.AllowAll(context.Background(), []limit.Request{local, strict}, res)
	if err != nil || ok {
		t.Fatalf("admitted %v (%v) with the local rule exhausted", ok, err)
	}
	if !res[1].Allowed || res[1].Remaining != 3 {
		t.Fatalf("the strict rule answers %+v; it should be untouched with 3 remaining", res[1])
	}
}

// While Redis is down, a decider keeps deciding locally on views reconciled
// within two intervals and then fails, so the decision's failure mode
// applies; counts made meanwhile reach Redis once it is back.
func TestLocalCountingWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	e, srv, clk := throwawayDecider(t, redis.Options{MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	rq := limit.Request{Key: "{d}", Limiter: bucket10, Cost: 1, Sync: 100 * time.Millisecond}
	for range 4 {
		decideOne(t, e, rq)
	}
	srv.Stop(t)
	clk.advance(100 * time.Millisecond)
	e.Reconcile(context.Background()) // fails: the 4 stay pending
	if st := e.LocalStats(); st.SyncErrors == 0 {
		t.Fatalf("no failed reconciliation counted: %+v", st)
	}
	for range 2 {
		decideOne(t, e, rq) // within two intervals of the last reconciliation
	}
	clk.advance(100 * time.Millisecond)
	res := make([]limit.Result, 1)
	if _, err := e.AllowAll(context.Background(), []limit.Request{rq}, res); err == nil {
		t.Fatal("decided on a view older than two intervals with Redis down")
	}
	srv.Start(t)
	e.Reconcile(context.Background())
	// The shared state holds the 6 admitted, from when they reached it:
	// 10 − 6 remaining, less the one decided now.
	strict := rq
	strict.Sync = 0
	if _, r := decideOne(t, e, strict); r.Remaining != 3 {
		t.Fatalf("after Redis came back the shared state answers %d remaining, want 3", r.Remaining)
	}
}

// On a cluster, reconciliation sends each slot's keys to their master.
func TestLocalCountingOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	clk := newClock()
	c := cl.Client(t)
	e := New(c, Config{Prefix: redistest.Prefix(t), MinTTL: testTTL, SyncTick: -1, Now: clk.Now, Batch: true})
	t.Cleanup(e.Close)
	for i := range 20 {
		rq := limit.Request{Key: fmt.Sprintf("{client-%d}", i), Limiter: bucket10, Cost: 3, Sync: 50 * time.Millisecond}
		decideOne(t, e, rq)
	}
	clk.advance(50 * time.Millisecond)
	e.Reconcile(context.Background())
	if st := e.LocalStats(); st.SyncErrors != 0 || st.Keys != 20 {
		t.Fatalf("after reconciling 20 keys on a cluster: %+v", st)
	}
	for i := range 20 {
		_, r := decideOne(t, e, limit.Request{Key: fmt.Sprintf("{client-%d}", i), Limiter: bucket10})
		if r.Remaining != 7 { // 10 − 3
			t.Fatalf("client %d: the shared state answers %d remaining, want 7", i, r.Remaining)
		}
	}
}

// Many clients on three deciders, reconciling meanwhile, at one instant:
// each decider admits at most one burst from its own view, so the three
// together at most three (the overshoot bound at its widest), and the
// shared state ends up holding every admission.
func TestLocalCountingUnderConcurrency(t *testing.T) {
	t.Parallel()
	clk := newClock()
	es, _ := localDeciders(t, 3, clk, true)
	rq := limit.Request{Key: "{hot}", Limiter: bucket10, Cost: 1, Sync: 100 * time.Millisecond}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for client := range 300 {
		e := es[client%3]
		wg.Go(func() {
			res := make([]limit.Result, 1)
			for range 5 {
				ok, err := e.AllowAll(context.Background(), []limit.Request{rq}, res)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					admitted.Add(1)
				}
			}
		})
		if client%50 == 0 {
			wg.Go(func() { e.Reconcile(context.Background()) })
		}
	}
	wg.Wait()
	if n := admitted.Load(); n < 10 || n > 30 {
		t.Fatalf("1500 decisions on three deciders admitted %d; want between one burst (10) and three (30)", n)
	}
	for _, e := range es {
		e.Reconcile(context.Background())
	}
	strict := rq
	strict.Sync, strict.Cost = 0, 0
	_, r := decideOne(t, es[0], strict)
	if want := max(0, 10-admitted.Load()); r.Remaining != want {
		t.Fatalf("the shared state answers %d remaining after %d admitted, want %d", r.Remaining, admitted.Load(), want)
	}
}

// Left to itself, the engine reconciles a key within its interval (plus a
// tick) of the decisions, with Redis's clock.
func TestLocalCountingReconcilesByItself(t *testing.T) {
	t.Parallel()
	c, prefix := redistest.Client(t)
	e := New(c, Config{Prefix: prefix, MinTTL: testTTL, Batch: true, SyncTick: 5 * time.Millisecond})
	t.Cleanup(e.Close)
	hourly := limit.MustCompile(policy.Params{Algorithm: policy.GCRA, Limit: 10, Window: time.Hour})
	rq := limit.Request{Key: "{self}", Limiter: hourly, Cost: 1, Sync: 20 * time.Millisecond}
	for range 4 {
		if ok, _ := decideOne(t, e, rq); !ok {
			t.Fatal("rejected within the burst")
		}
	}
	strict := limit.Request{Key: rq.Key, Limiter: hourly}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, r := decideOne(t, e, strict); r.Remaining == 6 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the shared state still answers %d remaining, want 6", r.Remaining)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A new config compiles new limiters; a key keeps its view across it (as
// Redis keeps its state), so a config push costs no round trip, and the
// new parameters apply at once.
func TestLocalViewSurvivesANewConfig(t *testing.T) {
	t.Parallel()
	clk := newClock()
	es, calls := localDeciders(t, 1, clk, false)
	e := es[0]
	rq := limit.Request{Key: "{cfg}", Limiter: bucket10, Cost: 1, Sync: 100 * time.Millisecond}
	for range 4 {
		decideOne(t, e, rq)
	}
	before := calls.n.Load()
	rq.Limiter = limit.MustCompile(policy.Params{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Second, Burst: 5})
	ok, r := decideOne(t, e, rq)
	if !ok || r.Remaining != 0 || r.Limit != 5 {
		t.Fatalf("after a new config with burst 5, the 5th unit: %v %+v, want admitted with 0 remaining", ok, r)
	}
	if n := calls.n.Load(); n != before {
		t.Fatalf("%d script calls for a new config, want none", n-before)
	}
	// A different family starts over with a fetch.
	rq.Limiter = window10
	decideOne(t, e, rq)
	if n := calls.n.Load(); n != before+1 {
		t.Fatalf("%d script calls after a change of algorithm family, want 1", n-before)
	}
}

// A decision waiting for another's fetch of the same key is not failed by
// that decision giving up: it fetches again.
func TestLocalFetchOutlivesTheCallerThatStartedIt(t *testing.T) {
	t.Parallel()
	e, srv, _ := throwawayDecider(t, redis.Options{ContextTimeoutEnabled: true})
	rq := limit.Request{Key: "{f}", Limiter: bucket10, Cost: 1, Sync: 100 * time.Millisecond}
	srv.Pause(t) // the first fetch hangs
	first, cancel := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		_, err := e.AllowAll(first, []limit.Request{rq}, make([]limit.Result, 1))
		firstDone <- err
	}()
	// The second decision finds the fetch under way and waits for it.
	second := make(chan error, 1)
	go func() {
		for e.LocalStats().Keys == 0 { // the first has created the key
			runtime.Gosched()
		}
		ok, err := e.AllowAll(context.Background(), []limit.Request{rq}, make([]limit.Result, 1))
		if err == nil && !ok {
			err = fmt.Errorf("rejected")
		}
		second <- err
	}()
	for e.LocalStats().Keys == 0 {
		runtime.Gosched()
	}
	cancel()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the canceled decision: %v", err)
	}
	srv.Resume(t)
	if err := <-second; err != nil {
		t.Fatalf("the decision that waited for the canceled one's fetch: %v", err)
	}
}

// Beyond MaxLocalKeys, new keys are decided in Redis, each decision a call.
func TestLocalKeyCap(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c, prefix := redistest.Client(t)
	counted := &commands{}
	c.AddHook(counted)
	e := New(c, Config{Prefix: prefix, MinTTL: testTTL, SyncTick: -1, Now: clk.Now, MaxLocalKeys: 2})
	t.Cleanup(e.Close)
	for _, key := range []string{"{a}", "{b}", "{c}"} {
		for range 3 {
			decideOne(t, e, limit.Request{Key: key, Limiter: bucket10, Cost: 1, Sync: time.Second})
		}
	}
	// {a} and {b}: one fetch each; {c}: three strict decisions.
	if st, n := e.LocalStats(), counted.n.Load(); st.Keys != 2 || n != 5 {
		t.Fatalf("%d keys counted locally and %d script calls, want 2 and 5", st.Keys, n)
	}
	strict := limit.Request{Key: "{c}", Limiter: bucket10}
	if _, r := decideOne(t, e, strict); r.Remaining != 7 {
		t.Fatalf("the key beyond the cap answers %d remaining in Redis, want 7", r.Remaining)
	}
}

// A decision on a key whose view is fresh does not wait for the key's
// periodic reconciliation, even when Redis hangs.
func TestLocalDecisionDoesNotWaitForAReconciliation(t *testing.T) {
	t.Parallel()
	e, srv, clk := throwawayDecider(t, redis.Options{ContextTimeoutEnabled: true})
	rq := limit.Request{Key: "{r}", Limiter: bucket10, Cost: 1, Sync: 100 * time.Millisecond}
	decideOne(t, e, rq)
	srv.Pause(t)
	done := make(chan struct{})
	go func() { e.Reconcile(context.Background()); close(done) }()
	sh := &e.local.shards[e.local.shardOf("{r}")]
	for { // until the reconciliation is under way
		sh.mu.Lock()
		busy := sh.m["{r}"].loading != nil
		sh.mu.Unlock()
		if busy {
			break
		}
		runtime.Gosched()
	}
	// Well under the reconciliation's own 1 s timeout: waiting for it fails.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ok, err := e.AllowAll(ctx, []limit.Request{rq}, make([]limit.Result, 1))
	if err != nil || !ok {
		t.Fatalf("a decision during a hung reconciliation: %v %v", ok, err)
	}
	srv.Resume(t)
	<-done
	clk.advance(time.Millisecond)
	e.Reconcile(context.Background())
	strict := limit.Request{Key: rq.Key, Limiter: bucket10}
	if _, r := decideOne(t, e, strict); r.Remaining != 8 {
		t.Fatalf("the shared state answers %d remaining after 2 admitted, want 8", r.Remaining)
	}
}

// Random schedules on one decider — costs, pauses, reconciliations — keep
// the algorithm's bound (a bucket never admits more than burst + rate ×
// elapsed), and a fixed window admits exactly what strict counting does.
func TestLocalCountingKeepsTheBoundOnOneDecider(t *testing.T) {
	t.Parallel()
	gcra := limit.MustCompile(policy.Params{Algorithm: policy.GCRA, Limit: 7, Window: 700 * time.Millisecond, Burst: 4})
	for seed := range uint64(6) {
		for _, tc := range []struct {
			lim   *limit.Limiter
			burst int64
		}{{bucket10, 10}, {gcra, 4}, {window10, 0}} {
			lim := tc.lim
			clk := newClock()
			start := clk.us.Load()
			es, _ := localDeciders(t, 1, clk, seed%2 == 0)
			rng := rand.New(rand.NewPCG(seed, 7))
			key := fmt.Sprintf("{rand-%d-%s}", seed, lim.Algorithm())
			var ref limit.State
			var got, want int64
			for step := range 300 {
				cost := 1 + rng.Int64N(3)
				ok, _ := decideOne(t, es[0], limit.Request{Key: key, Limiter: lim, Cost: cost, Sync: 50 * time.Millisecond})
				var w limit.Result
				ref, w = lim.Eval(ref, limit.Args{Now: clk.us.Load(), Cost: cost}, nil)
				if ok {
					got += cost
				}
				if w.Allowed {
					want += cost
				}
				if tc.burst > 0 {
					// 10 units per second for both buckets.
					if bound := tc.burst + (clk.us.Load()-start)/100_000; got > bound {
						t.Fatalf("seed %d, %s, step %d: %d units admitted, the bound is %d", seed, lim.Algorithm(), step, got, bound)
					}
				} else if got != want {
					t.Fatalf("seed %d, step %d: %d units admitted locally, strict counting %d", seed, step, got, want)
				}
				clk.advance(time.Duration(rng.Int64N(60_000)) * time.Microsecond)
				if rng.IntN(4) == 0 {
					es[0].Reconcile(context.Background())
				}
			}
		}
	}
}
