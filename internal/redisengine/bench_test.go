package redisengine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkScriptCPU reports the Redis CPU one decision costs (redis-µs/op,
// from INFO commandstats of a private server): the figure that bounds a
// Redis node's decisions per second. Decisions are pipelined 128 at a time
// over 10,000 keys with Redis's own clock, as the decider sends them.
func BenchmarkScriptCPU(b *testing.B) {
	for _, tc := range []struct {
		name  string
		rules []policy.Params
	}{
		{"token-bucket", []policy.Params{{Algorithm: policy.TokenBucket, Limit: 1000, Window: time.Second}}},
		{"fixed-window", []policy.Params{{Algorithm: policy.FixedWindow, Limit: 1000, Window: time.Second}}},
		{"sliding-window", []policy.Params{{Algorithm: policy.SlidingWindow, Limit: 1000, Window: time.Second}}},
		{"two-rules", []policy.Params{
			{Algorithm: policy.TokenBucket, Limit: 1000, Window: time.Second},
			{Algorithm: policy.FixedWindow, Limit: 100000, Window: time.Hour},
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := redistest.StartServer(b)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer c.Close()
			e := New(c, Config{})
			ctx := context.Background()
			if err := e.Preload(ctx); err != nil {
				b.Fatal(err)
			}
			limiters := make([]*limit.Limiter, len(tc.rules))
			for i, p := range tc.rules {
				limiters[i] = limit.MustCompile(p)
			}
			const batch = 128
			b.ResetTimer()
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for n := 0; n < b.N; n += batch {
				pipe := c.Pipeline()
				for i := n; i < n+batch && i < b.N; i++ {
					reqs := make([]limit.Request, len(limiters))
					for k, l := range limiters {
						reqs[k] = limit.Request{Key: fmt.Sprintf("{t|c%d}r%d", i%10000, k), Limiter: l, Cost: 1}
					}
					sc, keys, args, err := e.prepare("check", reqs, "")
					if err != nil {
						b.Fatal(err)
					}
					sc.EvalSha(ctx, pipe, keys, args...)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(evalUS(b, c), "redis-µs/op")
		})
	}
}

// evalUS reads the mean µs per EVALSHA from INFO commandstats.
func evalUS(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "cmdstat_evalsha:")), ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				return x
			}
		}
	}
	b.Fatalf("no evalsha in %q", info)
	return 0
}

// BenchmarkLocalDecision is a decision of one locally counted rule (a
// token bucket with a sync interval) on a key whose view is fresh: what
// the decider spends when Redis is not on the path. One goroutine, and
// parallel over 1,000 keys.
func BenchmarkLocalDecision(b *testing.B) {
	c, prefix := redistest.Client(b)
	e := New(c, Config{Prefix: prefix, SyncTick: -1})
	b.Cleanup(e.Close)
	lim := limit.MustCompile(policy.Params{Algorithm: policy.TokenBucket, Limit: 1_000_000_000, Window: time.Second})
	reqs := make([][]limit.Request, 1000)
	for i := range reqs {
		reqs[i] = []limit.Request{{Key: "{c" + strconv.Itoa(i) + "}r", Limiter: lim, Cost: 1, Sync: time.Minute}}
		if _, err := e.AllowAll(context.Background(), reqs[i], make([]limit.Result, 1)); err != nil { // the fetch
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		res := make([]limit.Result, 1)
		b.ReportAllocs()
		for i := range b.N {
			if ok, err := e.AllowAll(context.Background(), reqs[i%1000], res); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			res := make([]limit.Result, 1)
			for i := 0; pb.Next(); i++ {
				if ok, err := e.AllowAll(context.Background(), reqs[i%1000], res); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	})
}
