package redisengine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// A Redis Cluster master dies and its replica takes its slots over: while
// it is gone, each decision on its slots returns within its budget (an
// error, for the rule's failure mode to answer); after the failover the
// engine finds the new master by itself, loads its scripts there (a
// promoted replica has none), and the counters replicated before the
// death are all there: each client gets exactly what its limit has left.
func TestDecisionsThroughAMasterFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cl := redistest.StartCluster(t)
	repl := cl.AddReplica(t, 0)
	prefix := redistest.Prefix(t)
	const limitPerClient, before = 20, 8
	hourly := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: limitPerClient, Window: time.Hour})
	const now = 1_700_000_040_000_000

	master := redis.NewClient(&redis.Options{Addr: cl.Addrs[0]})
	t.Cleanup(func() { master.Close() })
	// Clients whose counters the dying master holds, and a probe that
	// finds out when its slots are served again.
	var names []string
	for i := 0; len(names) < 5; i++ {
		name := fmt.Sprintf("client-%d", i)
		if slot, err := master.ClusterKeySlot(ctx, name).Result(); err != nil {
			t.Fatal(err)
		} else if slot < 16384/3 {
			names = append(names, name)
		}
	}
	clients, probe := names[:4], names[4]

	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { c.Close() })
	e := New(c, Config{Prefix: prefix, MinTTL: testTTL, Batch: true})
	t.Cleanup(e.Close)
	// The budget of a decision while the master is gone; before and after,
	// a busy machine's seconds.
	const budget = 200 * time.Millisecond
	decide := func(name string, budget time.Duration) (bool, error) {
		bctx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		res := make([]limit.Result, 1)
		return e.AllowAllAt(bctx, []limit.Request{{Key: "{" + name + "}hourly", Limiter: hourly, Cost: 1}}, now, res)
	}

	for _, name := range clients {
		for range before {
			if ok, err := decide(name, 10*time.Second); !ok || err != nil {
				t.Fatalf("%s before the failover: %v, %v", name, ok, err)
			}
		}
	}
	// The replica has every count before its master dies. (WAIT would
	// wait for this connection's writes, and it has made none.)
	replica := redis.NewClient(&redis.Options{Addr: repl.Addr})
	t.Cleanup(func() { replica.Close() })
	offset := func(c *redis.Client, field string) string {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, v, _ := strings.Cut(info, field+":")
		v, _, _ = strings.Cut(v, "\r\n")
		return v
	}
	for deadline := time.Now().Add(10 * time.Second); offset(replica, "slave_repl_offset") != offset(master, "master_repl_offset"); {
		if time.Now().After(deadline) {
			t.Fatal("the replica never caught up with its master")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cl.Servers[0].Stop(t)

	// A failover takes about 4 s (twice the nodes' 2 s timeout, and the
	// election); the deadline is for a machine busy with every other test.
	const failoverBound = 60 * time.Second
	deadline := time.Now().Add(failoverBound)
	failed := 0
	for {
		start := time.Now()
		_, err := decide(probe, budget)
		// The budget, not Redis's or the dialer's timeouts (seconds),
		// bounds it; the second of slack is for a busy machine.
		if took := time.Since(start); took > budget+time.Second {
			t.Fatalf("a decision during the failover took %v, its budget %v", took, budget)
		}
		if err == nil {
			break
		}
		if failed++; time.Now().After(deadline) {
			// Whether the cluster failed over (and the engine did not follow)
			// or not: the replica's view of it.
			nodes, nerr := replica.ClusterNodes(ctx).Result()
			t.Fatalf("the master's slots are not served again after %d decisions: %v\nthe replica's CLUSTER NODES (%v):\n%s", failed, err, nerr, nodes)
		}
	}
	if failed == 0 {
		t.Fatal("no decision failed while the master was gone")
	}
	t.Logf("slots served again after %v (%d decisions refused)", time.Since(deadline.Add(-failoverBound)).Round(time.Millisecond), failed)
	for _, name := range clients {
		admitted := 0
		for range limitPerClient {
			ok, err := decide(name, 10*time.Second)
			if err != nil {
				t.Fatalf("%s after the failover: %v", name, err)
			}
			if ok {
				admitted++
			}
		}
		if admitted != limitPerClient-before {
			t.Errorf("%s: %d admitted after the failover, want %d (%d of %d counted before it)", name, admitted, limitPerClient-before, before, limitPerClient)
		}
	}
}
