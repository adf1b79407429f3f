package decide

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// BenchmarkClusterScaling decides on a Redis Cluster of 1, 2 and 3
// masters with 1, 2 and 3 deciders (each its own engine and connections,
// in this process), strict and with local counting (a rule's sync of
// 1 s), 64 callers in all over 1,000 clients: each key decided several
// times a second on each decider, as local counting is meant for (a key
// idle for two intervals waits for a reconciliation again). It reports, per
// decision, the CPU of the deciders (decider-µs/op: this process, the
// callers' loop included, no wire protocol) and of the masters
// (redis-µs/op, all masters together; busiest-master-µs/op, the most
// loaded one). On two cores the deciders and masters share the machine,
// so decisions/s do not grow with them: the CPU per decision is the
// figure, from which docs/scaling.md sizes a fleet.
func BenchmarkClusterScaling(b *testing.B) {
	for masters := 1; masters <= 3; masters++ {
		b.Run(fmt.Sprintf("masters=%d", masters), func(b *testing.B) {
			cl := redistest.StartClusterOf(b, masters)
			for deciders := 1; deciders <= 3; deciders++ {
				for _, mode := range []struct {
					name string
					sync time.Duration
				}{{"strict", 0}, {"local", time.Second}} {
					b.Run(fmt.Sprintf("deciders=%d/%s", deciders, mode.name), func(b *testing.B) {
						benchCluster(b, cl, deciders, scaleTenant(b, "t", 1, mode.sync))
					})
				}
			}
		})
	}
}

// BenchmarkDecisionCost is how the CPU of a strict decision grows with
// the rules a request meets, the tenants a decider serves (in turn, over
// 10,000 clients each) and the keys Redis holds (10,000 counters among
// 10,000 or 1,000,000 keys), on one master and one decider: the other
// terms of docs/scaling.md's arithmetic.
func BenchmarkDecisionCost(b *testing.B) {
	cl := redistest.StartClusterOf(b, 1)
	for _, rules := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("rules=%d", rules), func(b *testing.B) {
			benchCluster(b, cl, 1, scaleTenant(b, "t", rules, 0))
		})
	}
	for _, tenants := range []int{1, 1000} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			cs := make([]*Compiled, tenants)
			for i := range cs {
				cs[i] = scaleTenant(b, "t"+strconv.Itoa(i), 1, 0)
			}
			benchClusterOf(b, cl, 1, cs, 10_000)
		})
	}
	for _, keys := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			pad(b, cl.Addrs[0], keys-10_000)
			benchClusterOf(b, cl, 1, []*Compiled{scaleTenant(b, "t", 1, 0)}, 10_000)
		})
	}
}

// pad stores n keys of 16 bytes each on the master at addr (which holds
// every slot), deleted when the benchmark ends: a keyspace of that size
// around the counters.
func pad(b *testing.B, addr string, n int) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	prefix := redistest.Prefix(b)
	for from := 0; from < n; from += 10_000 {
		pipe := c.Pipeline()
		for i := from; i < min(from+10_000, n); i++ {
			pipe.Set(ctx, prefix+strconv.Itoa(i), "0123456789abcdef", 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		_ = c.FlushAll(context.Background()).Err()
	})
}

// scaleTenant is tenant id with rules token buckets per client, each of
// a million a second (never rejecting), counted locally with sync.
func scaleTenant(b testing.TB, id string, rules int, sync time.Duration) *Compiled {
	tier := policy.Tier{Name: "free"}
	for i := range rules {
		tier.Rules = append(tier.Rules, policy.Rule{ID: fmt.Sprint("r", i), Name: fmt.Sprint("rule-", i), KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 1_000_000, Window: time.Second}, Sync: sync})
	}
	c, err := Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: id, Slug: id, Name: id, DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{tier}})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// benchCluster is benchClusterOf for one tenant over 1,000 clients.
func benchCluster(b *testing.B, cl *redistest.Cluster, deciders int, c *Compiled) {
	benchClusterOf(b, cl, deciders, []*Compiled{c}, 1_000)
}

// benchClusterOf runs b.N decisions on deciders deciders over cl, from
// 64 callers, for clients of the tenants cs in turn, and reports
// decisions/s and the CPU per decision of this process and of the masters.
func benchClusterOf(b *testing.B, cl *redistest.Cluster, deciders int, cs []*Compiled, clients int) {
	prefix := redistest.Prefix(b)
	ds := make([]*Decider, deciders)
	for i := range ds {
		ds[i] = NewDecider(Options{Counters: clusterEngine(b, cl, prefix), Budget: 5 * time.Second})
	}
	// Warm: every connection open, every script loaded.
	for i, d := range ds {
		if _, err := d.Decide(context.Background(), cs[0], check(fmt.Sprint("warm-", i))); err != nil {
			b.Fatal(err)
		}
	}
	ids := make([]string, clients)
	for i := range ids {
		ids[i] = "client-" + strconv.Itoa(i)
	}
	redis0 := redisCPU(b, cl.Addrs)
	cpu0 := cputest.ProcessCPU()
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		d := ds[g%deciders]
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				dec, err := d.Decide(context.Background(), cs[int(i)%len(cs)], check(ids[(i*7919)%int64(clients)]))
				if err != nil || dec.Degraded || !dec.Allowed {
					b.Errorf("decision %d: %+v %v", i, dec, err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := cputest.ProcessCPU() - cpu0
	redis1 := redisCPU(b, cl.Addrs)
	var all, busiest time.Duration
	for i := range redis1 {
		d := redis1[i] - redis0[i]
		all += d
		busiest = max(busiest, d)
	}
	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(cpu.Microseconds())/n, "decider-µs/op")
	b.ReportMetric(float64(all.Microseconds())/n, "redis-µs/op")
	b.ReportMetric(float64(busiest.Microseconds())/n, "busiest-master-µs/op")
}

// redisCPU is the CPU each of addrs has used (INFO cpu).
func redisCPU(b testing.TB, addrs []string) []time.Duration {
	out := make([]time.Duration, len(addrs))
	for i, info := range infos(b, addrs, "cpu") {
		for _, line := range strings.Split(info, "\r\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
				s, _ := strconv.ParseFloat(v, 64)
				out[i] += time.Duration(s * float64(time.Second))
			}
		}
	}
	return out
}
