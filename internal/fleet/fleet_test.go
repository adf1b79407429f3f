package fleet_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/adaptive"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/fleet"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// backend serves one request per worker at a time for service each,
// the others waiting their turn: its capacity is workers in flight.
type backend struct {
	workers chan struct{}
	service time.Duration
}

func newBackend(workers int, service time.Duration) *backend {
	return &backend{workers: make(chan struct{}, workers), service: service}
}

// serve serves one request and returns its latency, or dropped after
// patience waiting for a worker.
func (b *backend) serve(patience time.Duration) (time.Duration, adaptive.Outcome) {
	start := time.Now()
	t := time.NewTimer(patience)
	defer t.Stop()
	select {
	case b.workers <- struct{}{}:
	case <-t.C:
		return time.Since(start), adaptive.Dropped
	}
	time.Sleep(b.service)
	<-b.workers
	return time.Since(start), adaptive.Succeeded
}

// member is one decider of the fleet.
type member struct {
	fleet   *fleet.Fleet
	decider *decide.Decider
	stop    context.CancelFunc
}

const window = 250 * time.Millisecond

func rule() policy.Rule {
	return policy.Rule{ID: "backend", Name: "backend", KeyBy: []string{"route"}, Enabled: true, FailureMode: policy.FailLocal,
		Params: policy.Params{Algorithm: policy.AdaptiveConcurrency, Limit: 1000, Window: window, LeaseTTL: 5 * time.Second}}
}

// TestFleetHoldsOneLimit: deciders on one Redis, clients three times the
// backend's capacity behind them. The fleet's leases in flight never pass
// the fleet's limit by more than 5%, the limit finds the backend's
// capacity, and it holds while deciders join and leave.
func TestFleetHoldsOneLimit(t *testing.T) {
	cputest.Alone(t) // real time: a busy machine would slow the backend it measures
	for _, n := range []int{1, 3, 8} {
		t.Run(string(rune('0'+n))+"-deciders", func(t *testing.T) { fleetRun(t, n) })
	}
}

func fleetRun(t *testing.T, n int) {
	// A service time well above what a busy machine adds to a request
	// (scheduling, the race detector), so that the latency the limit reads
	// is the backend's.
	const workers, service = 20, 100 * time.Millisecond
	client, prefix := redistest.Client(t)
	c, err := decide.Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{rule()}}}})
	if err != nil {
		t.Fatal(err)
	}
	join := func(i int) *member {
		eng := redisengine.New(client, redisengine.Config{Prefix: prefix})
		t.Cleanup(eng.Close)
		f := fleet.New(fleet.Config{Client: client, Prefix: prefix, Adapter: eng, Name: "decider-" + string(rune('a'+i))})
		ctx, stop := context.WithCancel(context.Background())
		go f.Run(ctx)
		t.Cleanup(stop)
		return &member{fleet: f, decider: decide.NewDecider(decide.Options{Counters: eng, Budget: time.Second, Adaptive: f}), stop: stop}
	}
	var mu sync.Mutex
	members := make([]*member, n)
	ever := make([]*member, n) // a decider that left may still answer a decision that began before
	for i := range members {
		members[i] = join(i)
		ever[i] = members[i]
	}
	be := newBackend(workers, service)
	var inFlight, admitted, over, samples atomic.Int64
	var worst atomic.Int64 // the most in flight over the limit, in thousandths of it
	key := func() string {
		ds := policy.Descriptors{{Key: "route", Value: "/search"}}
		r := rule()
		r.ID = "backend"
		return string(policy.AppendCounterKey(nil, "t", &r, ds))
	}()
	limitNow := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		var l int64
		for _, m := range ever {
			l = max(l, m.fleet.Limit(key))
		}
		return l
	}
	var limits sync.Map // window index → the highest limit answered in it
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client0 := func(id int) {
		defer wg.Done()
		req := decide.Request{Descriptors: policy.Descriptors{{Key: "route", Value: "/search"}}}
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			m := members[id%len(members)]
			mu.Unlock()
			dec, err := m.decider.Decide(context.Background(), c, req)
			if err != nil {
				t.Error(err)
				return
			}
			if !dec.Allowed {
				time.Sleep(service / 4)
				continue
			}
			if dec.Degraded {
				t.Errorf("a degraded decision: %+v", dec)
			}
			// Redis admits a lease only while the fleet's leases are within
			// the limit it answers; a lease taken under a limit since
			// lowered is held until its request ends (at most 1.1 s), so
			// the limit in force is the highest answered in the last 1.25 s.
			l := dec.Rules[0].Limit
			w := time.Now().UnixMicro() / window.Microseconds()
			for {
				v, loaded := limits.LoadOrStore(w, l)
				if !loaded || v.(int64) >= l || limits.CompareAndSwap(w, v, l) {
					break
				}
			}
			now := inFlight.Add(1)
			admitted.Add(1)
			hi := l
			for k := w - 5; k <= w; k++ {
				if v, ok := limits.Load(k); ok {
					hi = max(hi, v.(int64))
				}
			}
			if now*1000 > 1050*hi {
				over.Add(1)
			}
			for {
				cur := worst.Load()
				if now*1000/hi <= cur || worst.CompareAndSwap(cur, now*1000/hi) {
					break
				}
			}
			lat, o := be.serve(10 * service)
			inFlight.Add(-1)
			samples.Add(1)
			rel := req
			rel.Latency, rel.Outcome = lat, o
			if err := m.decider.ReleaseHeld(context.Background(), c, rel, dec); err != nil {
				t.Error(err)
				return
			}
		}
	}
	clients := 3 * workers
	for i := range clients {
		wg.Add(1)
		go client0(i)
	}
	settle := func(d time.Duration) (lo, hi int64) {
		time.Sleep(d)
		lo, hi = 1<<62, 0
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			l := limitNow()
			lo, hi = min(lo, l), max(hi, l)
			time.Sleep(window / 2)
		}
		return lo, hi
	}
	lo, hi := settle(5 * time.Second)
	t.Logf("%d deciders: the limit over a second, settled: %d to %d (the backend takes %d)", n, lo, hi, workers)
	if lo < workers*7/10 || hi > workers*3/2 {
		t.Errorf("the limit went from %d to %d, want it near the backend's %d", lo, hi, workers)
	}
	// A decider joins, and the first one leaves (the updater, likely).
	mu.Lock()
	members = append(members, join(n))
	ever = append(ever, members[n])
	members[0].stop()
	members = members[1:]
	mu.Unlock()
	lo, hi = settle(2 * window)
	t.Logf("two windows after one joined and one left, over a second: %d to %d", lo, hi)
	if lo < workers*7/10 || hi > workers*3/2 {
		t.Errorf("after one joined and one left, the limit went from %d to %d, want it near the backend's %d", lo, hi, workers)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d admitted; %d times in flight over 1.05× the limit; worst %.3f× the limit", admitted.Load(), over.Load(), float64(worst.Load())/1000)
	if over.Load() > 0 {
		t.Errorf("in flight passed 1.05× the fleet's limit %d times", over.Load())
	}
}

// A partitioned rule through the decider: the partition is the value of
// its partition_by descriptor. Free requests alone borrow the whole
// limit; once gold asks, a slot free lets go goes to gold, not to free.
func TestPartitionsThroughTheDecider(t *testing.T) {
	client, prefix := redistest.Client(t)
	r := rule()
	r.Limit, r.PartitionBy, r.Partitions = 10, "plan", []policy.Partition{{Value: "gold", Share: 0.5}}
	c, err := decide.Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{r}}}})
	if err != nil {
		t.Fatal(err)
	}
	eng := redisengine.New(client, redisengine.Config{Prefix: prefix})
	t.Cleanup(eng.Close)
	f := fleet.New(fleet.Config{Client: client, Prefix: prefix, Adapter: eng, Name: "a"})
	d := decide.NewDecider(decide.Options{Counters: eng, Budget: time.Second, Adaptive: f})
	ctx := context.Background()
	ask := func(plan string) (decide.Request, decide.Decision) {
		req := decide.Request{Descriptors: policy.Descriptors{{Key: "plan", Value: plan}, {Key: "route", Value: "/search"}}}
		dec, err := d.Decide(ctx, c, req)
		if err != nil {
			t.Fatal(err)
		}
		return req, dec
	}
	// The limit until the first update is 10 (the fleet's initial limit).
	var free []decide.Decision
	var freeReq decide.Request
	for range 10 {
		req, dec := ask("free")
		if !dec.Allowed {
			t.Fatalf("free alone was refused with %d held, of 10", len(free))
		}
		freeReq, free = req, append(free, dec)
	}
	if _, dec := ask("gold"); dec.Allowed {
		t.Fatal("gold was admitted over the limit")
	}
	if err := d.ReleaseHeld(ctx, c, freeReq, free[0]); err != nil {
		t.Fatal(err)
	}
	if _, dec := ask("free"); dec.Allowed {
		t.Fatal("free took back the slot it let go, over its share, while gold asks")
	}
	if _, dec := ask("gold"); !dec.Allowed {
		t.Fatal("gold, under its share, did not get the slot free let go")
	}
}

// While Redis fails, each decider enforces its share of the last limit
// it heard: two deciders at half each admit 5 of a limit of 10 between
// them, not 10 each.
func TestEachDeciderHoldsItsShareWhileRedisFails(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	c, err := decide.Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{rule()}}}})
	if err != nil {
		t.Fatal(err)
	}
	req := decide.Request{Descriptors: policy.Descriptors{{Key: "route", Value: "/search"}}}
	var deciders []*decide.Decider
	for i := range 2 {
		eng := redisengine.New(client, redisengine.Config{Prefix: "share:"})
		t.Cleanup(eng.Close)
		f := fleet.New(fleet.Config{Client: client, Prefix: "share:", Adapter: eng, Name: strconv.Itoa(i)})
		d := decide.NewDecider(decide.Options{Counters: eng, Local: limit.NewEngine(limit.EngineConfig{}), LocalShare: 0.5,
			Budget: 100 * time.Millisecond, Adaptive: f})
		if _, err := d.Decide(context.Background(), c, req); err != nil { // the limit heard: 10, the first
			t.Fatal(err)
		}
		deciders = append(deciders, d)
	}
	srv.Pause(t)
	admitted := 0
	for _, d := range deciders {
		for range 10 {
			dec, err := d.Decide(context.Background(), c, req)
			if err != nil {
				t.Fatal(err)
			}
			if !dec.Degraded {
				t.Fatalf("a decision with Redis frozen was not degraded: %+v", dec)
			}
			if dec.Allowed {
				admitted++
			}
		}
	}
	if admitted != 10 {
		t.Fatalf("two deciders at half a limit of 10 admitted %d with Redis frozen, want 10", admitted)
	}
}
