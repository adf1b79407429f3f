package redisengine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/enginetest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// In tests, time is passed explicitly and jumps ahead of the wall clock, so
// keys must not expire by Redis's clock while a scenario runs.
const testTTL = time.Hour

// conformance runs the suite on c, batched or not; each scenario gets its
// own key prefix, cleaned afterwards.
func conformance(t *testing.T, c redis.UniversalClient, batch bool) {
	enginetest.Run(t, "", func(t *testing.T) enginetest.Engine {
		e := New(c, Config{MinTTL: testTTL, Prefix: redistest.Prefix(t), Batch: batch})
		t.Cleanup(e.Close)
		t.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), c, e.cfg.Prefix) })
		return e
	})
}

func TestConformance(t *testing.T) {
	t.Parallel()
	single, _ := redistest.Client(t)
	cluster := redistest.StartCluster(t).Client(t)
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("single-batch=%v", batch), func(t *testing.T) { t.Parallel(); conformance(t, single, batch) })
		t.Run(fmt.Sprintf("cluster-batch=%v", batch), func(t *testing.T) { t.Parallel(); conformance(t, cluster, batch) })
	}
}

func TestSlotMatchesRedis(t *testing.T) {
	t.Parallel()
	c, _ := redistest.Client(t)
	for _, k := range []string{"", "a", "user:1000", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "{t|1:x}r1", "x{y"} {
		want, err := c.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Skipf("CLUSTER KEYSLOT unavailable on a non-cluster server: %v", err)
		}
		if got := Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, Redis says %d", k, got, want)
		}
	}
}

// A decision spanning slots that another slot rejects consumes nothing:
// the rule that reserved in its slot is refunded, exactly, for every
// algorithm (warm-up buckets refund at the stable rate, so they are left
// out), and answers from its untouched state.
func TestCrossSlotRejectionRefunds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cc := redistest.StartCluster(t).Client(t)
	e := New(cc, Config{Prefix: redistest.Prefix(t), MinTTL: testTTL})
	gate := limit.MustCompile(policy.Params{Algorithm: policy.Concurrency, Limit: 1, LeaseTTL: time.Hour})
	const now = 1_700_000_040_000_000
	res := make([]limit.Result, 2)
	if ok, err := e.AllowAllAt(ctx, []limit.Request{{Key: "{gate}", Limiter: gate, Cost: 1, Lease: 999}}, now, res); err != nil || !ok {
		t.Fatalf("holding the gate: %v %v", ok, err)
	}
	for i, p := range enginetest.Params() {
		if p.WarmUp > 0 {
			continue
		}
		l := limit.MustCompile(p)
		key, fresh := fmt.Sprintf("{r%d}", i), fmt.Sprintf("{fresh%d}", i)
		if Slot(key) == Slot("{gate}") {
			t.Fatalf("%s shares the gate's slot", key)
		}
		for k := range 3 {
			reqs := []limit.Request{{Key: key, Limiter: l, Cost: 1, Lease: int64(k + 1)}, {Key: "{gate}", Limiter: gate, Cost: 1, Lease: int64(k + 1)}}
			ok, err := e.AllowAllAt(ctx, reqs, now+int64(k), res)
			if err != nil || ok || !res[0].Allowed || res[1].Allowed {
				t.Fatalf("%s: decision %d: %v %v %+v", p.Algorithm, k, ok, err, res)
			}
			// Answered from the untouched state: as a fresh key would.
			want := make([]limit.Result, 1)
			_, _ = e.AllowAllAt(ctx, []limit.Request{{Key: fresh, Limiter: l, Cost: 0, Lease: 1}}, now+int64(k), want)
			if res[0].Remaining != want[0].Remaining {
				t.Fatalf("%s: decision %d answered remaining %d, a fresh key has %d", p.Algorithm, k, res[0].Remaining, want[0].Remaining)
			}
		}
		got, want := make([]limit.Result, 1), make([]limit.Result, 1)
		_, _ = e.AllowAllAt(ctx, []limit.Request{{Key: key, Limiter: l, Cost: 1, Lease: 7}}, now+10, got)
		_, _ = e.AllowAllAt(ctx, []limit.Request{{Key: fresh, Limiter: l, Cost: 1, Lease: 7}}, now+10, want)
		if got[0] != want[0] {
			t.Fatalf("%s after 3 refunded decisions: %+v, a fresh key: %+v", p.Algorithm, got[0], want[0])
		}
	}
}

// With Redis's own clock, a limit is still enforced exactly.
func TestRedisClock(t *testing.T) {
	t.Parallel()
	c, prefix := redistest.Client(t)
	e := New(c, Config{Prefix: prefix})
	if err := e.Preload(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := limit.MustCompile(enginetest.Params()[8]) // fixed window of 5 per 1.3 s
	res := make([]limit.Result, 1)
	admitted := 0
	for i := range 20 {
		ok, err := e.AllowAll(context.Background(), []limit.Request{{Key: fmt.Sprintf("{k%d}", i%2), Limiter: l, Cost: 1}}, res)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	// Two keys of 5 each; a window boundary may fall inside the loop once.
	if admitted < 10 || admitted > 20 {
		t.Fatalf("admitted %d of 20", admitted)
	}
	ttl, err := c.PTTL(context.Background(), prefix+"{k0}").Result()
	// At most twice the longer of the window and the minimum TTL (flat.lua).
	if err != nil || ttl <= 0 || ttl > 2*1300*time.Millisecond {
		t.Fatalf("key TTL %v (err %v): every write must expire", ttl, err)
	}
}

// TestFlatScriptsKeepExpiries: on Redis's clock, a key decided by a flat
// script always lives at least as long as its state matters (the answer's
// reset, at least the minimum TTL) and at most twice that or a minute more,
// whichever is less, from when its expiry was set, and a write that
// needs no later expiry keeps the key's (setting one costs Redis as much as
// the rest of the write), so a busy key's expiry is set rarely. A key so
// written stays readable by decide.lua, whatever its rule's algorithm has
// become.
func TestFlatScriptsKeepExpiries(t *testing.T) {
	t.Parallel()
	c, prefix := redistest.Client(t)
	e := New(c, Config{Prefix: prefix, MinTTL: 100 * time.Millisecond})
	ctx := context.Background()
	for _, p := range []policy.Params{
		{Algorithm: policy.TokenBucket, Limit: 100, Window: 100 * time.Second}, // each decision's state matters 1 s longer
		{Algorithm: policy.FixedWindow, Limit: 100, Window: time.Hour},
		{Algorithm: policy.SlidingWindow, Limit: 100, Window: time.Hour},
	} {
		l := limit.MustCompile(p)
		key := string(p.Algorithm)
		res := make([]limit.Result, 1)
		var prev time.Duration
		sets, start := 0, time.Now()
		const n = 30
		for i := range n {
			before := time.Now()
			if _, err := e.AllowAll(ctx, []limit.Request{{Key: key, Limiter: l, Cost: 1}}, res); err != nil {
				t.Fatal(err)
			}
			ttl, err := c.PTTL(ctx, prefix+key).Result()
			if err != nil {
				t.Fatal(err)
			}
			// The key must outlive the decision by need: as PTTL sees it,
			// by need less the time the two calls took (and a ms of
			// rounding); and at most by twice need, less than a minute
			// (the windows', in the last minute of an hour), where the
			// script's whole ms, rounded up and doubled, and PTTL's
			// rounding add up to 3 ms.
			need, took := max(res[0].ResetAfter, 100*time.Millisecond), time.Since(before)+time.Millisecond
			if ttl < need-took || ttl > need+min(need, time.Minute)+time.Since(start)+3*time.Millisecond {
				t.Fatalf("%s, decision %d: key TTL %v, its state matters for %v", p.Algorithm, i, ttl, need)
			}
			if ttl > prev {
				sets++
			}
			prev = ttl
		}
		// The token bucket's need grows by 1 s a decision: doubling, its
		// expiry is set about log2(30) times; the windows' once.
		if want := map[policy.Algorithm]int{policy.TokenBucket: 6}[p.Algorithm]; sets > max(want, 1) {
			t.Errorf("%s: the expiry was set %d times in %d decisions", p.Algorithm, sets, n)
		}
		// decide.lua, on the same key, takes the expiry's record for none
		// of its states: a sliding log (whose state is its entries) starts
		// afresh, as from a key of another algorithm.
		logged := limit.MustCompile(policy.Params{Algorithm: policy.SlidingLog, Limit: 2, Window: time.Hour})
		if ok, err := e.AllowAll(ctx, []limit.Request{{Key: key, Limiter: logged, Cost: 1}}, res); err != nil || !ok || res[0].Remaining != 1 {
			t.Fatalf("%s key then a sliding log: %v %v %+v", p.Algorithm, ok, err, res[0])
		}
	}
}

// TestEveryScriptReadsEveryState: a rule's key is decided by a flat script
// when the rule is a decision's only one, by multi.lua or decide.lua when
// others come with it, and reconciled by sync.lua; the flat scripts'
// encoding and decide.lua's MessagePack are each read alike by all of them,
// on Redis's clock and on a given one.
func TestEveryScriptReadsEveryState(t *testing.T) {
	t.Parallel()
	c, prefix := redistest.Client(t)
	e := New(c, Config{Prefix: prefix, MinTTL: testTTL})
	ctx := context.Background()
	logged := limit.MustCompile(policy.Params{Algorithm: policy.SlidingLog, Limit: 100, Window: time.Hour})
	hourly := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 100, Window: time.Hour})
	for _, p := range []policy.Params{
		{Algorithm: policy.TokenBucket, Limit: 6, Window: time.Hour},
		{Algorithm: policy.FixedWindow, Limit: 6, Window: time.Hour},
		{Algorithm: policy.SlidingWindow, Limit: 6, Window: time.Hour},
	} {
		l := limit.MustCompile(p)
		for _, clock := range []string{"redis", "given"} {
			key := string(p.Algorithm) + clock
			via := []struct {
				script string
				reqs   []limit.Request
			}{
				{"flat", []limit.Request{{Key: key, Limiter: l, Cost: 1}}},
				{"decide.lua", []limit.Request{{Key: key, Limiter: l, Cost: 1}, {Key: key + "log", Limiter: logged, Cost: 1}}},
				{"multi.lua", []limit.Request{{Key: key, Limiter: l, Cost: 1}, {Key: key + "hourly", Limiter: hourly, Cost: 1}}},
			}
			const now = 3_600_000_000 * 500_000 // a window's start: the windows' counts stay put
			for i := range 7 {
				v := via[i%len(via)]
				res := make([]limit.Result, len(v.reqs))
				var ok bool
				var err error
				if clock == "redis" {
					ok, err = e.AllowAll(ctx, v.reqs, res)
				} else {
					ok, err = e.AllowAllAt(ctx, v.reqs, now, res)
				}
				if err != nil {
					t.Fatal(err)
				}
				if want := int64(5 - i); ok != (i < 6) || (ok && res[0].Remaining != want) {
					t.Fatalf("%s, %s clock, decision %d by %s: admitted %v, remaining %d; want %v, %d",
						p.Algorithm, clock, i, v.script, ok, res[0].Remaining, i < 6, want)
				}
			}
			if clock == "redis" {
				continue
			}
			// sync.lua reads the six admitted: a debt of six intervals, or
			// a count of six.
			family, param, want := familyFixed, int64(time.Hour/time.Microsecond), int64(6)
			if p.Algorithm == policy.TokenBucket {
				family, param, want = familyMeter, int64(10*time.Minute/time.Microsecond), 6*int64(10*time.Minute/time.Microsecond)
			}
			reply, err := syncScript.Run(ctx, c, []string{prefix + key}, now, 1, family, 0, param, now).Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			if p.Algorithm != policy.SlidingWindow && reply[1] != want {
				t.Errorf("%s: sync.lua reads %d, want %d", p.Algorithm, reply[1], want)
			}
		}
	}
}

// A pipeline refused with NOSCRIPT (Redis restarted or flushed) loads the
// script and succeeds: pipelines do not fall back to EVAL by themselves.
func TestBatchedRecoversFromNOSCRIPT(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	e := New(c, Config{Batch: true})
	defer e.Close()
	l := limit.MustCompile(enginetest.Params()[0])
	res := make([]limit.Result, 1)
	for i := range 3 {
		if i == 1 {
			if err := c.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := e.AllowAll(context.Background(), []limit.Request{{Key: "{k}", Limiter: l, Cost: 1}}, res); err != nil || !ok {
			t.Fatalf("decision %d: %v %v", i, ok, err)
		}
	}
}

// Release ends a lease at Redis's time, batched or not: a full concurrency
// limit admits again once a lease is released, and releasing an unknown
// lease changes nothing.
func TestReleaseEndsALease(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		c, prefix := redistest.Client(t)
		e := New(c, Config{Prefix: prefix, Batch: batch})
		t.Cleanup(e.Close)
		l := limit.MustCompile(policy.Params{Algorithm: policy.Concurrency, Limit: 2, LeaseTTL: time.Minute})
		ctx := context.Background()
		take := func(lease int64) bool {
			ok, err := e.AllowAll(ctx, []limit.Request{{Key: "{conc}", Limiter: l, Cost: 1, Lease: lease}}, make([]limit.Result, 1))
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		// Lease ids up to 2^53 (the decider's own, decide.NewLease), told
		// apart to the last digit.
		const top = 1<<53 - 1
		if !take(top) || !take(top-1) || take(top-2) || !take(top) {
			t.Fatalf("batch %v: two leases of two, then a third must wait (and the first renews)", batch)
		}
		if err := e.Release(ctx, []limit.Request{{Key: "{conc}", Limiter: l, Lease: top - 3}}); err != nil || take(top-2) {
			t.Fatalf("batch %v: releasing an unknown lease freed a slot (%v)", batch, err)
		}
		if err := e.Release(ctx, []limit.Request{{Key: "{conc}", Limiter: l, Lease: top}}); err != nil {
			t.Fatal(err)
		}
		if !take(top-2) || take(top-3) {
			t.Fatalf("batch %v: after releasing lease %d, exactly one more lease fits", batch, int64(top))
		}
	}
}

// An adaptive concurrency rule's limit is the one its updater set (Adapt)
// once there is one, its own until then; the leases that expire unreleased
// are counted once, for the updater, as requests dropped.
func TestAdaptSetsTheFleetLimit(t *testing.T) {
	t.Parallel()
	c, prefix := redistest.Client(t)
	e := New(c, Config{Prefix: prefix})
	t.Cleanup(e.Close)
	l := limit.MustCompile(policy.Params{Algorithm: policy.AdaptiveConcurrency, Limit: 100, Window: time.Second, LeaseTTL: time.Second})
	ctx := context.Background()
	t0 := time.Now().UnixMicro()
	take := func(lease, now int64) limit.Result {
		res := make([]limit.Result, 1)
		if _, err := e.AllowAllAt(ctx, []limit.Request{{Key: "{backend}", Limiter: l, Cost: 1, Lease: lease}}, now, res); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if r := take(1, t0); !r.Allowed || r.Limit != 100 || r.Remaining != 99 {
		t.Fatalf("before any limit is set: %+v, want the rule's own 100", r)
	}
	if before, expired, err := e.Adapt(ctx, "{backend}", l, 2); err != nil || before != 0 || expired != 0 {
		t.Fatalf("adapt: %d, %d, %v", before, expired, err)
	}
	if r := take(2, t0+1); !r.Allowed || r.Limit != 2 || r.Remaining != 0 {
		t.Fatalf("second lease under a fleet limit of 2: %+v", r)
	}
	if r := take(3, t0+2); r.Allowed {
		t.Fatalf("a third lease under a fleet limit of 2 was admitted: %+v", r)
	}
	// Both leases expire unreleased; the next lease counts them.
	if r := take(4, t0+2_000_000); !r.Allowed {
		t.Fatalf("after the leases expired: %+v", r)
	}
	if err := e.ReleaseAt(ctx, "{backend}", l, t0+2_000_001, 4); err != nil {
		t.Fatal(err)
	}
	before, expired, err := e.Adapt(ctx, "{backend}", l, 0)
	if err != nil || before != 2 || expired != 2 {
		t.Fatalf("adapt: limit %d and %d expired leases (%v), want 2 and 2", before, expired, err)
	}
	if _, expired, _ := e.Adapt(ctx, "{backend}", l, 0); expired != 0 {
		t.Fatalf("the expired leases were counted again: %d", expired)
	}
}

// The per-limiter argument cache forgets a limiter once it is collected,
// so a decider that replaces its config every few seconds holds nothing
// of the configs it dropped.
func TestArgCacheForgetsCollectedLimiters(t *testing.T) {
	var c argCache
	for i := range 100 {
		l := limit.MustCompile(policy.Params{Algorithm: policy.TokenBucket, Limit: int64(i + 1), Window: time.Second})
		if a := c.get(l); a.single == nil || a != c.get(l) {
			t.Fatalf("limiter %d: args %+v, not cached", i, a)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		n := 0
		c.m.Range(func(any, any) bool { n++; return true })
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries remain for collected limiters", n)
		}
		runtime.Gosched()
	}
}

// The calls of one batch share one pipeline; a call counted locally, or
// with no rule, is answered beside them without holding them up; an
// unbatched engine answers a batch too.
func TestBatchSharesOnePipeline(t *testing.T) {
	t.Parallel()
	c, prefix := redistest.Client(t)
	pipes := &redistest.Pipelines{Command: "evalsha"}
	c.AddHook(pipes)
	e := New(c, Config{Prefix: prefix, MinTTL: testTTL, Batch: true, SyncTick: -1})
	t.Cleanup(e.Close)
	ctx := context.Background()
	if err := e.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	l := limit.MustCompile(policy.Params{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Second})
	batchOf := func(from, n int) []limit.Call {
		batch := make([]limit.Call, n)
		for i := range batch {
			batch[i] = limit.Call{Reqs: []limit.Request{{Key: fmt.Sprintf("{b%d}", from+i), Limiter: l, Cost: 1}}, Res: make([]limit.Result, 1)}
		}
		return batch
	}
	answered := func(batch []limit.Call) {
		t.Helper()
		for i, c := range batch {
			if c.Err != nil || len(c.Reqs) > 0 && (!c.Allowed || c.Res[0].Remaining != 9) {
				t.Fatalf("call %d: %v %v %+v", i, c.Allowed, c.Err, c.Res)
			}
		}
	}

	before := pipes.Count()
	p0, c0 := e.Pipelines()
	batch := batchOf(0, 40)
	e.AllowBatch(ctx, 5*time.Second, batch)
	answered(batch)
	if got := pipes.Count() - before; got != 1 {
		t.Errorf("a batch of 40 took %d pipelines, want 1", got)
	}
	if p1, c1 := e.Pipelines(); p1-p0 != 1 || c1-c0 != 40 {
		t.Errorf("Pipelines counted %d pipelines of %d calls, want 1 of 40", p1-p0, c1-c0)
	}

	// A call counted locally fetches its key's state beside the others:
	// the strict ones go together all the same, and an empty call is
	// admitted.
	batch = append(batchOf(100, 3), limit.Call{Allowed: false})
	batch[0].Reqs[0].Sync = time.Second
	p0, c0 = e.Pipelines()
	e.AllowBatch(ctx, 5*time.Second, batch)
	answered(batch)
	if !batch[3].Allowed {
		t.Error("a call of no rule was not admitted")
	}
	if p1, c1 := e.Pipelines(); p1-p0 > 2 || c1-c0 != 3 {
		t.Errorf("a batch of 2 strict calls and a local one took %d pipelines of %d calls, want the fetch and the strict pair", p1-p0, c1-c0)
	}
	if st := e.LocalStats(); st.Keys != 1 {
		t.Errorf("%d keys counted locally, want 1", st.Keys)
	}

	unbatched := New(c, Config{Prefix: prefix, MinTTL: testTTL})
	t.Cleanup(unbatched.Close)
	batch = batchOf(200, 3)
	unbatched.AllowBatch(ctx, 5*time.Second, batch)
	answered(batch)
}

// The calls of a batch end at their budget while they wait in the queue
// behind a pipeline that Redis holds (it hangs, pipelines back up): the
// queue fails them at their deadline, not the flusher once it is free.
func TestBatchKeepsItsBudget(t *testing.T) {
	t.Parallel()
	e, l := stuckEngine(t)
	req := func(k string) []limit.Request { return []limit.Request{{Key: k, Limiter: l, Cost: 1}} }

	// Hold the flusher, and queue calls behind it.
	fill, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for i := range 8 {
		go func() { _, _ = e.AllowAll(fill, req(fmt.Sprintf("{fill%d}", i)), make([]limit.Result, 1)) }()
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if n, _ := e.Pipelines(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no pipeline went out")
		}
		runtime.Gosched()
	}

	batch := []limit.Call{{Reqs: req("{g0}"), Res: make([]limit.Result, 1)}, {Reqs: req("{g1}"), Res: make([]limit.Result, 1)}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.AllowBatch(context.Background(), 300*time.Millisecond, batch)
	}()
	// go-redis gives up on the stuck pipeline after its 3s read timeout;
	// both calls must have ended long before.
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("a batch outlived its budget in the queue")
	}
	for i, c := range batch {
		if !errors.Is(c.Err, limit.ErrOverloaded) || !errors.Is(c.Err, context.DeadlineExceeded) {
			t.Errorf("call %d past its budget in the queue: %v, want overload", i, c.Err)
		}
	}
}

// stuckEngine is a batching engine with one flusher and pipelines of one
// call on a Redis that never answers, and a token-bucket limiter.
func stuckEngine(t *testing.T) (*Engine, *limit.Limiter) {
	c := redis.NewClient(&redis.Options{Addr: silentRedis(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	e := New(c, Config{Batch: true, BatchSize: 1, Flushers: 1})
	t.Cleanup(e.Close)
	return e, limit.MustCompile(policy.Params{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Second})
}

// silentRedis is a Redis address that accepts connections and never
// answers.
func silentRedis(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { conn.Close() })
		}
	}()
	return ln.Addr().String()
}

// TestBudgetBoundsBatchedDecisions: a strict decision through the
// flushers carries its budget as a deadline without a timer of its own,
// so the pipeline must end by it. Against a Redis that never
// answers, with one flusher, a decision and one queued behind it each end
// at their own deadline, not at go-redis's timeouts (seconds).
func TestBudgetBoundsBatchedDecisions(t *testing.T) {
	t.Parallel()
	e, l := stuckEngine(t)
	const budget = 200 * time.Millisecond
	type end struct {
		took time.Duration
		err  error
	}
	ends := make(chan end, 2)
	for i := range 2 {
		go func() {
			start := time.Now()
			batch := []limit.Call{{Reqs: []limit.Request{{Key: fmt.Sprint(i), Limiter: l, Cost: 1}}, Res: make([]limit.Result, 1)}}
			e.AllowBatch(context.Background(), budget, batch)
			ends <- end{time.Since(start), batch[0].Err}
		}()
	}
	for range 2 {
		select {
		case r := <-ends:
			if !errors.Is(r.err, context.DeadlineExceeded) || r.took < budget-10*time.Millisecond || r.took > budget+500*time.Millisecond {
				t.Errorf("a decision ended after %v with %v; want DeadlineExceeded at its %v budget", r.took, r.err, budget)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a decision outlived its budget")
		}
	}
}

// TestExpiredCallDoesNotCutItsPipeline: a call whose deadline passed
// while it was queued fails at once; the others of its pipeline are
// answered.
func TestExpiredCallDoesNotCutItsPipeline(t *testing.T) {
	t.Parallel()
	c, prefix := redistest.Client(t)
	e := New(c, Config{Prefix: prefix, Batch: true})
	t.Cleanup(e.Close)
	l := limit.MustCompile(policy.Params{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Second})
	sc, keys, args, err := e.prepare("check", []limit.Request{{Key: "k", Limiter: l, Cost: 1}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	expired := &call{script: sc, keys: keys, args: args, done: newDone(), deadline: time.Now().Add(-time.Millisecond)}
	live := &call{script: sc, keys: keys, args: args, done: newDone(), deadline: time.Now().Add(time.Minute)}
	e.flush([]*call{expired, live})
	<-expired.done
	<-live.done
	if !errors.Is(expired.err, context.DeadlineExceeded) {
		t.Errorf("expired call: %v", expired.err)
	}
	if live.err != nil || len(live.reply) == 0 {
		t.Errorf("live call: %v %v", live.reply, live.err)
	}
}

// TestPipelinedDecisionsShareOneCallPerScript: a pipeline's decisions
// become one EVALSHA per script — single.lua's and window1.lua's (one rule
// of the meter or window family), multi.lua's (several rules of those
// families, shadow rules among them) and decide.lua's (an algorithm no
// flat script decides) — and each answers as it would have alone, in the
// pipeline's order, all or nothing, the same key decided several times
// included.
func TestPipelinedDecisionsShareOneCallPerScript(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	merged, alone := New(c, Config{Prefix: "m:", Batch: true, MinTTL: testTTL}), New(c, Config{Prefix: "a:", MinTTL: testTTL})
	t.Cleanup(merged.Close)
	t.Cleanup(alone.Close)
	if err := merged.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	bucket := limit.MustCompile(policy.Params{Algorithm: policy.TokenBucket, Limit: 2, Window: time.Second})
	gcra := limit.MustCompile(policy.Params{Algorithm: policy.GCRA, Limit: 3, Window: time.Second})
	fixed := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Second})
	sliding := limit.MustCompile(policy.Params{Algorithm: policy.SlidingWindow, Limit: 3, Window: time.Second})
	log := limit.MustCompile(policy.Params{Algorithm: policy.SlidingLog, Limit: 2, Window: time.Second})
	hourly := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 4, Window: time.Hour})
	one := func(key string, l *limit.Limiter, cost int64) []limit.Request {
		return []limit.Request{{Key: key, Limiter: l, Cost: cost}}
	}
	two := func(key string, cost int64) []limit.Request { // per client, and a shared hourly cap
		return []limit.Request{{Key: key, Limiter: bucket, Cost: cost}, {Key: "all", Limiter: hourly, Cost: cost}}
	}
	shadowed := func(key string, cost int64) []limit.Request { // a shadow rule per client, an enforced sliding window
		return []limit.Request{{Key: key, Limiter: bucket, Cost: cost, Shadow: true}, {Key: "s", Limiter: sliding, Cost: cost}}
	}
	mixed := func(key string) []limit.Request { // a flat rule and one only decide.lua decides
		return []limit.Request{{Key: key, Limiter: gcra, Cost: 1}, {Key: "l1", Limiter: log, Cost: 1}}
	}
	decisions := [][]limit.Request{
		one("k0", bucket, 1), one("k1", gcra, 2), one("w0", fixed, 1), two("d0", 1), one("l0", log, 1),
		one("k0", bucket, 1), one("w1", sliding, 2), one("w0", fixed, 1), two("d0", 1), one("l0", log, 1),
		one("k0", bucket, 1), one("k2", bucket, 5), one("k1", gcra, 1), two("d1", 1), one("l0", log, 1),
		one("w0", fixed, 1), one("w1", sliding, 2), one("w2", fixed, 3), two("d1", 2), two("d2", 3),
		one("k1", gcra, 1), one("w1", sliding, 1), two("d0", 1), shadowed("h0", 1), shadowed("h0", 2),
		shadowed("h1", 1), mixed("m0"), mixed("m1"), mixed("m0"), shadowed("h0", 1), two("d3", 1),
	}
	const now = 1_000_000_000
	calls := make([]*call, len(decisions))
	for i, reqs := range decisions {
		sc, keys, args, err := merged.prepare("check", reqs, strconv.Itoa(now), nil)
		if err != nil {
			t.Fatal(err)
		}
		calls[i] = &call{script: sc, keys: keys, args: args, done: newDone()}
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	merged.flush(calls)
	stats, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "cmdstat_evalsha:calls=4,") {
		t.Errorf("want four EVALSHAs for the pipeline, one per script:\n%s", stats)
	}
	for i, cl := range calls {
		<-cl.done
		reqs := decisions[i]
		got := make([]limit.Result, len(reqs))
		if cl.err != nil {
			t.Fatalf("decision %d: %v", i, cl.err)
		}
		gotAdmitted, err := merged.decode(cl.script, reqs, cl.reply, got)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]limit.Result, len(reqs))
		wantAdmitted, err := alone.AllowAllAt(ctx, reqs, now, want)
		if err != nil {
			t.Fatal(err)
		}
		if gotAdmitted != wantAdmitted || !slices.Equal(got, want) {
			t.Errorf("decision %d (%s, cost %d): merged %v %+v, alone %v %+v", i, reqs[0].Key, reqs[0].Cost,
				gotAdmitted, got, wantAdmitted, want)
		}
	}
}

// TestMergedCallsRecoverFromNOSCRIPT: a merged call refused for a flushed
// script is sent again whole, and each of its decisions gets its answer.
func TestMergedCallsRecoverFromNOSCRIPT(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	e := New(c, Config{Batch: true})
	t.Cleanup(e.Close)
	if err := c.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	l := limit.MustCompile(policy.Params{Algorithm: policy.TokenBucket, Limit: 1, Window: time.Minute})
	calls := make([]*call, 4)
	for i := range calls {
		sc, keys, args, err := e.prepare("check", []limit.Request{{Key: "k" + strconv.Itoa(i%3), Limiter: l, Cost: 1}}, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		calls[i] = &call{script: sc, keys: keys, args: args, done: newDone()}
	}
	e.flush(calls)
	for i, cl := range calls {
		<-cl.done
		res := make([]limit.Result, 1)
		ok, err := e.decode(cl.script, []limit.Request{{Limiter: l, Cost: 1}}, cl.reply, res)
		if cl.err != nil || err != nil {
			t.Fatalf("decision %d: %v %v", i, cl.err, err)
		}
		// Limit 1: the fourth decision is k0's second.
		if ok != (i < 3) {
			t.Errorf("decision %d allowed %v", i, ok)
		}
	}
}

// FuzzConformance runs a conformance scenario over rule parameters the
// fuzzer picks (any that validate): the Lua scripts, batched, must answer
// every decision as the in-process engine does.
func FuzzConformance(f *testing.F) {
	f.Add(uint8(policy.TokenBucket), int64(10), int64(1000), int64(5), int64(0), int64(0), uint64(1))
	f.Add(uint8(policy.TokenBucket), int64(3), int64(1000), int64(9), int64(500), int64(25), uint64(2))
	f.Add(uint8(policy.GCRA), int64(7), int64(1000), int64(3), int64(0), int64(0), uint64(3))
	f.Add(uint8(policy.LeakyBucket), int64(5), int64(1000), int64(0), int64(700), int64(0), uint64(4))
	f.Add(uint8(policy.FixedWindow), int64(5), int64(1300), int64(0), int64(0), int64(0), uint64(5))
	f.Add(uint8(policy.FixedWindow), int64(4), int64(-2), int64(0), int64(0), int64(0), uint64(10))
	f.Add(uint8(policy.SlidingLog), int64(6), int64(900), int64(0), int64(0), int64(0), uint64(6))
	f.Add(uint8(policy.SlidingWindow), int64(7), int64(1000), int64(0), int64(0), int64(0), uint64(7))
	f.Add(uint8(policy.SlidingBuckets), int64(9), int64(3000), int64(0), int64(1500), int64(0), uint64(8))
	f.Add(uint8(policy.Concurrency), int64(3), int64(0), int64(0), int64(2000), int64(0), uint64(9))
	f.Add(uint8(policy.AdaptiveConcurrency), int64(3), int64(1000), int64(0), int64(2000), int64(0), uint64(11))
	c, _ := redistest.Client(f)
	f.Fuzz(func(t *testing.T, alg uint8, lim, windowMs, burst, extraMs, cold int64, seed uint64) {
		ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
		p := policy.Params{Algorithm: policy.Algorithm(alg), Limit: lim, Window: ms(windowMs)}
		switch p.Algorithm {
		case policy.TokenBucket:
			p.Burst, p.WarmUp = burst, ms(extraMs)
			if p.WarmUp > 0 {
				p.ColdFactor = float64(cold) / 10
			}
		case policy.GCRA:
			p.Burst = burst
		case policy.FixedWindow:
			if windowMs < 0 { // a calendar window: -1 week, -2 month, -3 year
				p.Window, p.Calendar = 0, policy.Calendar(-windowMs)
			}
		case policy.LeakyBucket:
			p.MaxDelay = ms(extraMs)
		case policy.SlidingBuckets:
			p.Granularity = ms(extraMs)
		case policy.Concurrency:
			p.Window, p.LeaseTTL = 0, ms(extraMs)
		case policy.AdaptiveConcurrency:
			p.LeaseTTL = ms(extraMs)
		}
		if p.Validate() != nil {
			return
		}
		e := New(c, Config{MinTTL: testTTL, Prefix: redistest.Prefix(t), Batch: true})
		defer e.Close()
		defer func() { _ = redistest.DeleteKeys(context.Background(), c, e.cfg.Prefix) }()
		enginetest.Scenario(t, "", seed, p, e)
	})
}

// Calendar windows end where the in-process engine says, across month
// and year ends, leap days, centuries and a time zone's changes of offset.
// A UTC calendar rule alone is decided by the flat script (window1.lua,
// from day counts); beside a sliding log, or in a time zone, by
// decide.lua from the edges the decider passes (limit.CalendarEdges). At
// each boundary a fresh key is checked just before it, at it and a day
// later, alone and beside a sliding log; the answers (remaining, reset,
// retry) must be the same.
func TestCalendarWindowBoundaries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, e, ref := calendarEngines(t)
	logRule := limit.MustCompile(policy.Params{Algorithm: policy.SlidingLog, Limit: 100, Window: time.Second})
	for _, zone := range []string{"", "America/Santiago", "Australia/Lord_Howe"} {
		loc, _ := policy.Location(zone)
		for cal := policy.CalendarWeek; cal <= policy.CalendarDay; cal++ {
			l := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Calendar: cal, TimeZone: zone})
			for _, y := range []int{1970, 2000, 2024, 2100} {
				for m := time.January; m <= time.December; m++ {
					d := 1
					if cal == policy.CalendarDay { // days of a change of offset, some
						d = 1 + int(m)*2
					}
					b, _ := limit.CalendarWindow(time.Date(y, m, d, 12, 0, 0, 0, loc).UnixMicro(), cal, loc)
					for i, now := range []int64{b - 1, b, b + 24*3600*1_000_000, b - 1, b, b + 24*3600*1_000_000} {
						if now < 0 {
							continue
						}
						key := fmt.Sprintf("{cal|%s|%s}%d-%d", zone, cal, y, m)
						reqs := []limit.Request{{Key: key, Limiter: l, Cost: 1}}
						if i >= 3 {
							reqs = []limit.Request{{Key: key + "g", Limiter: l, Cost: 1}, {Key: key + "log", Limiter: logRule, Cost: 1}}
						}
						want, got := make([]limit.Result, len(reqs)), make([]limit.Result, len(reqs))
						ref.AllowAll(reqs, now, want)
						if _, err := e.AllowAllAt(ctx, reqs, now, got); err != nil {
							t.Fatal(err)
						}
						if got[0] != want[0] {
							t.Fatalf("%s %s window, %s, %d rules: Redis %+v, in process %+v", zone, cal, time.UnixMicro(now).In(loc), len(reqs), got[0], want[0])
						}
					}
				}
			}
		}
	}
}

// calendarEngines returns a Redis engine under the test's own prefix, its
// client, and an in-process engine to compare it with.
func calendarEngines(t *testing.T) (*redis.Client, *Engine, *limit.Engine) {
	c, _ := redistest.Client(t)
	e := New(c, Config{MinTTL: testTTL, Prefix: redistest.Prefix(t)})
	t.Cleanup(e.Close)
	t.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), c, e.cfg.Prefix) })
	return c, e, limit.NewEngine(limit.EngineConfig{})
}

// A decider's clock and Redis's may straddle a calendar window's edge:
// the script then takes the window of its own clock from the edges the
// decider sent. Here the decider's clock (the edges' time) runs ahead of
// and behind the script's by up to a day; every answer must be the
// in-process engine's at the script's time.
func TestCalendarWindowClocksStraddle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, e, ref := calendarEngines(t)
	paris, _ := policy.Location("Europe/Paris")
	l := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Calendar: policy.CalendarDay, TimeZone: "Europe/Paris"})
	midnight := time.Date(2026, 3, 29, 0, 0, 0, 0, paris).UnixMicro() // the day of 23 hours
	for i, skew := range []time.Duration{-23 * time.Hour, -time.Second, time.Second, 23 * time.Hour} {
		for _, at := range []int64{midnight - 1, midnight, midnight + 1} {
			key := fmt.Sprintf("{straddle}%d-%d", i, at)
			reqs := []limit.Request{{Key: key, Limiter: l, Cost: 1}}
			for range 3 {
				_, keys, args, err := e.prepare("check", reqs, strconv.FormatInt(at+skew.Microseconds(), 10), nil)
				if err != nil {
					t.Fatal(err)
				}
				args[0] = strconv.FormatInt(at, 10) // the script's clock
				reply, err := script.Run(ctx, c, keys, args...).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				got := make([]limit.Result, 1)
				if _, err := decode(reply, 1, got); err != nil {
					t.Fatal(err)
				}
				want := make([]limit.Result, 1)
				ref.AllowAll([]limit.Request{{Key: key, Limiter: l, Cost: 1}}, at, want)
				if got[0] != want[0] {
					t.Fatalf("decider %v off, script at %s: %+v, want %+v", skew, time.UnixMicro(at).In(paris), got[0], want[0])
				}
			}
		}
	}
}

// On Redis's own clock, as deciders run, a calendar window ends where the
// calendar says: a monthly quota's reset runs to the next 1st, a weekly
// one's to the next Monday, a daily one's to the next midnight, in Tokyo;
// a second check counts in the same window.
func TestCalendarWindowOnRedisClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := redistest.Client(t)
	e := New(c, Config{Prefix: redistest.Prefix(t), Batch: true})
	t.Cleanup(e.Close)
	t.Cleanup(func() { _ = redistest.DeleteKeys(context.Background(), c, e.cfg.Prefix) })
	tokyo, _ := policy.Location("Asia/Tokyo")
	for cal := policy.CalendarWeek; cal <= policy.CalendarDay; cal++ {
		l := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 5, Calendar: cal, TimeZone: "Asia/Tokyo"})
		reqs := []limit.Request{{Key: "{cal}" + cal.String(), Limiter: l, Cost: 2}}
		res := make([]limit.Result, 1)
		for want := int64(3); want >= 1; want -= 2 {
			rt, err := c.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := e.AllowAll(ctx, reqs, res); err != nil || !ok {
				t.Fatalf("%s: %v %v", cal, ok, err)
			}
			_, end := limit.CalendarWindow(rt.UnixMicro(), cal, tokyo)
			left := time.Duration(end-rt.UnixMicro()) * time.Microsecond
			// Redis's clock moved on by the call's round trip, at most.
			if res[0].Remaining != want || res[0].ResetAfter > left || res[0].ResetAfter < left-time.Second {
				t.Fatalf("%s window: %+v, want remaining %d and a reset of about %v", cal, res[0], want, left)
			}
		}
	}
}
