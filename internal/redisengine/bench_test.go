package redisengine

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// BenchmarkScriptCPU reports the Redis CPU one decision costs (redis-µs/op,
// from INFO commandstats of a private server): the figure that bounds a
// Redis node's decisions per second. Decisions are pipelined 12 at a time
// (a busy decider's pipelines) over 10,000 keys with Redis's own clock,
// one call each, or, for "merged", as the flusher sends them: the
// pipeline's single-rule decisions in one call. SLUICE_SCRIPT_REDIS (an
// address) measures that server instead of a private one: one run under
// valgrind --tool=callgrind counts Redis's instructions per decision, a
// figure the machine's noise does not move.
func BenchmarkScriptCPU(b *testing.B) {
	for _, tc := range []struct {
		name   string
		rules  []policy.Params
		merged bool
	}{
		{"token-bucket-merged", []policy.Params{{Algorithm: policy.TokenBucket, Limit: 1000, Window: time.Second}}, true},
		{"fixed-window-merged", []policy.Params{{Algorithm: policy.FixedWindow, Limit: 1000, Window: time.Second}}, true},
		{"token-bucket", []policy.Params{{Algorithm: policy.TokenBucket, Limit: 1000, Window: time.Second}}, false},
		{"fixed-window", []policy.Params{{Algorithm: policy.FixedWindow, Limit: 1000, Window: time.Second}}, false},
		{"sliding-window", []policy.Params{{Algorithm: policy.SlidingWindow, Limit: 1000, Window: time.Second}}, false},
		{"calendar-month-merged", []policy.Params{{Algorithm: policy.FixedWindow, Limit: 1_000_000, Calendar: policy.CalendarMonth}}, true},
		{"calendar-month", []policy.Params{{Algorithm: policy.FixedWindow, Limit: 1_000_000, Calendar: policy.CalendarMonth}}, false},
		{"calendar-day-zone-merged", []policy.Params{{Algorithm: policy.FixedWindow, Limit: 1_000_000, Calendar: policy.CalendarDay, TimeZone: "America/New_York"}}, true},
		{"calendar-day-zone", []policy.Params{{Algorithm: policy.FixedWindow, Limit: 1_000_000, Calendar: policy.CalendarDay, TimeZone: "America/New_York"}}, false},
		{"two-rules", []policy.Params{
			{Algorithm: policy.TokenBucket, Limit: 1000, Window: time.Second},
			{Algorithm: policy.FixedWindow, Limit: 100000, Window: time.Hour},
		}, false},
		{"two-rules-merged", []policy.Params{
			{Algorithm: policy.TokenBucket, Limit: 1000, Window: time.Second},
			{Algorithm: policy.FixedWindow, Limit: 100000, Window: time.Hour},
		}, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			addr := os.Getenv("SLUICE_SCRIPT_REDIS")
			if addr == "" {
				addr = redistest.StartServer(b).Addr
			}
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			// Keys outlive the run (none expires, as a busy one does not):
			// what a decision costs, without the churn of expiries.
			e := New(c, Config{MinTTL: time.Hour})
			ctx := context.Background()
			if err := e.Preload(ctx); err != nil {
				b.Fatal(err)
			}
			limiters := make([]*limit.Limiter, len(tc.rules))
			for i, p := range tc.rules {
				limiters[i] = limit.MustCompile(p)
			}
			const batch = 12
			b.ResetTimer()
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			for n := 0; n < b.N; n += batch {
				pipe := c.Pipeline()
				var calls []*call
				for i := n; i < n+batch && i < b.N; i++ {
					reqs := make([]limit.Request, len(limiters))
					for k, l := range limiters {
						reqs[k] = limit.Request{Key: fmt.Sprintf("{t|c%d}r%d", i%10000, k), Limiter: l, Cost: 1}
					}
					sc, keys, args, err := e.prepare("check", reqs, "", nil)
					if err != nil {
						b.Fatal(err)
					}
					calls = append(calls, &call{script: sc, keys: keys, args: args})
				}
				ws := []wire{}
				if tc.merged {
					ws = e.wires(calls)
				} else {
					for _, c := range calls {
						ws = append(ws, wire{script: c.script, keys: c.keys, args: c.args})
					}
				}
				for _, w := range ws {
					w.script.EvalSha(ctx, pipe, w.keys, w.args...)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(evalUS(b, c)/float64(b.N), "redis-µs/op")
		})
	}
}

// evalUS reads the µs Redis spent in EVALSHA from INFO commandstats.
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
			if v, ok := strings.CutPrefix(f, "usec="); ok {
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
