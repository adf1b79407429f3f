package redisengine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/testkit/enginetest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// hammer runs 3 deciders (each its own client) × 100 clients × 5 checks on
// one key per algorithm at one instant, and requires exactly the
// algorithm's answer: no over-admission, and no under-admission either.
func hammer(t *testing.T, newClient func() redis.UniversalClient, prefix string, batch bool) {
	ctx := context.Background()
	const now = 1_700_000_040_000_000
	deciders := make([]*Engine, 3)
	for i := range deciders {
		c := newClient()
		t.Cleanup(func() { c.Close() })
		deciders[i] = New(c, Config{Prefix: prefix, MinTTL: testTTL, Batch: batch})
		t.Cleanup(deciders[i].Close)
	}
	for i, p := range enginetest.Params() {
		l := limit.MustCompile(p)
		key := fmt.Sprintf("{acc-%d}", i)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for client := range 300 {
			e := deciders[client%3]
			wg.Go(func() {
				res := make([]limit.Result, 1)
				for k := range 5 {
					ok, err := e.AllowAllAt(ctx, []limit.Request{{Key: key, Limiter: l, Cost: 1, Lease: int64(client*5 + k)}}, now, res)
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got, want := admitted.Load(), enginetest.AdmitsAtOnce(l, now, 1500); got != want {
			t.Errorf("%s %+v: 1500 concurrent checks admitted %d, the algorithm allows %d", p.Algorithm, p, got, want)
		}
	}
}

// mustClient is a client as the decider makes it (NewClient: reads that
// spin), so these tests also hold spinning reads to every byte.
func mustClient(t *testing.T, url string, cluster bool) redis.UniversalClient {
	t.Helper()
	c, err := NewClient(url, ClientOptions{Cluster: cluster, Spin: LowLatencySpin})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAccuracyUnderConcurrencySingleNode(t *testing.T) {
	t.Parallel()
	_, prefix := redistest.Client(t)
	addr := redistest.Addr(t)
	for _, batch := range []bool{false, true} {
		hammer(t, func() redis.UniversalClient { return mustClient(t, "redis://"+addr+"?pool_size=50", false) }, fmt.Sprintf("%s%v:", prefix, batch), batch)
	}
}

func TestAccuracyUnderConcurrencyCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	for _, batch := range []bool{false, true} {
		hammer(t, func() redis.UniversalClient {
			return mustClient(t, "redis://"+cl.Addrs[0]+"?addr="+cl.Addrs[1]+"&addr="+cl.Addrs[2]+"&pool_size=50", true)
		}, fmt.Sprintf("%s%v:", redistest.Prefix(t), batch), batch)
	}
}

// Concurrent decisions spanning cluster slots (a per-client rule and a
// global one, in different slots) never over-admit either rule: each slot
// reserves before any answer, and refunds only follow rejections.
func TestCrossSlotNeverOverAdmits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartCluster(t)
	prefix := redistest.Prefix(t)
	const now = 1_700_000_040_000_000
	perClient := limit.MustCompile(enginetest.Params()[8]) // fixed window, 5 per 1.3 s
	global := limit.MustCompile(enginetest.Params()[4])    // GCRA, burst 3
	var admitted atomic.Int64
	perKey := make([]atomic.Int64, 4)
	var wg sync.WaitGroup
	for d := range 3 {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, PoolSize: 50})
		t.Cleanup(func() { c.Close() })
		e := New(c, Config{Prefix: prefix, MinTTL: testTTL, Batch: d == 0})
		t.Cleanup(e.Close)
		for client := range 100 {
			wg.Go(func() {
				res := make([]limit.Result, 2)
				id := client % 4
				reqs := []limit.Request{{Key: fmt.Sprintf("{client-%d}", id), Limiter: perClient, Cost: 1}, {Key: "{global}", Limiter: global, Cost: 1}}
				ok, err := e.AllowAllAt(ctx, reqs, now, res)
				if err != nil {
					t.Error(err)
				}
				if ok {
					admitted.Add(1)
					perKey[id].Add(1)
				}
			})
		}
	}
	wg.Wait()
	if got := admitted.Load(); got < 1 || got > 3 {
		t.Fatalf("300 decisions admitted %d; the global rule allows 3", got)
	}
	for id := range perKey {
		if n := perKey[id].Load(); n > 5 {
			t.Fatalf("client %d admitted %d times; its rule allows 5", id, n)
		}
	}
}
