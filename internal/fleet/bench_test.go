package fleet_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/adaptive"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/fleet"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// BenchmarkAdaptiveDecision is what an adaptive rule adds to a decision:
// a lease taken and released, with the release's sample, by 8 callers
// on one decider (all admitted: the limit starts at 10), against a
// concurrency rule's lease. A partitioned rule refuses some: a partition
// over its share while the others are active.
// It reports the decider's CPU and Redis's per decision, and the Redis
// calls per decision: the lease and its release, the window's samples
// (a call a window) beside.
func BenchmarkAdaptiveDecision(b *testing.B) {
	for _, tc := range []struct {
		name string
		rule func(*policy.Rule)
	}{
		{"concurrency", func(r *policy.Rule) { r.Algorithm, r.Window = policy.Concurrency, 0 }},
		{"adaptive", func(*policy.Rule) {}},
		{"adaptive-partitioned", func(r *policy.Rule) {
			r.PartitionBy, r.Partitions = "plan", []policy.Partition{{Value: "gold", Share: 0.5}, {Value: "free", Share: 0.3}}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := redistest.StartServer(b)
			client := redis.NewClient(&redis.Options{Addr: srv.Addr})
			b.Cleanup(func() { client.Close() })
			r := rule()
			r.Limit = 10_000
			tc.rule(&r)
			c, err := decide.Compile(&policy.Snapshot{Tenant: policy.Tenant{ID: "t", Slug: "t", Name: "T", DefaultTier: "free"}, Version: 1,
				Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{r}}}})
			if err != nil {
				b.Fatal(err)
			}
			eng := redisengine.New(client, redisengine.Config{Prefix: "bench:", Batch: true})
			b.Cleanup(eng.Close)
			f := fleet.New(fleet.Config{Client: client, Prefix: "bench:", Adapter: eng, Name: "a"})
			ctx, stop := context.WithCancel(context.Background())
			b.Cleanup(stop)
			go f.Run(ctx)
			d := decide.NewDecider(decide.Options{Counters: eng, Budget: 5 * time.Second, Adaptive: f})
			plans := []string{"gold", "free", "other"}
			var refused atomic.Int64
			decideOne := func(i int64) {
				req := decide.Request{Descriptors: policy.Descriptors{{Key: "plan", Value: plans[i%3]}, {Key: "route", Value: "/search"}}}
				dec, err := d.Decide(context.Background(), c, req)
				switch {
				case err != nil:
					b.Fatal(err)
				case !dec.Allowed:
					refused.Add(1)
					return
				}
				req.Latency, req.Outcome = 3*time.Millisecond, adaptive.Succeeded
				if err := d.ReleaseHeld(context.Background(), c, req, dec); err != nil {
					b.Error(err)
				}
			}
			decideOne(0) // scripts loaded, connections open
			calls0, redisUS0 := commandStats(b, client)
			cpu0 := cputest.ProcessCPU()
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						decideOne(i)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			cpu := cputest.ProcessCPU() - cpu0
			calls1, redisUS1 := commandStats(b, client)
			n := float64(b.N)
			b.ReportMetric(float64(cpu.Microseconds())/n, "decider-µs/op")
			b.ReportMetric((redisUS1-redisUS0)/n, "redis-µs/op")
			b.ReportMetric((calls1-calls0)/n, "redis-calls/op")
			b.ReportMetric(float64(refused.Load())/n, "refused/op")
		})
	}
}

// commandStats is how many scripts Redis ran (every call a decider
// makes) and its µs in them, from INFO commandstats.
func commandStats(b *testing.B, c *redis.Client) (calls, us float64) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		stat, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		name, fields, _ := strings.Cut(stat, ":")
		if !ok || name != "evalsha" && name != "eval" {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += x
			case "usec":
				us += x
			}
		}
	}
	return calls, us
}
