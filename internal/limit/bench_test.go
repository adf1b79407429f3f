package limit

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/internal/policy"
)

// The benchmarks measure a check on an existing key in the in-process
// engine (token bucket, mostly admitted) against golang.org/x/time/rate's
// Allow on one limiter. Engine checks take the time as an argument, as
// every caller already has it (Redis TIME, or one clock read per decision);
// rate.Allow reads the clock itself. BenchmarkAllowHotKeyWithClock includes
// a time.Now per check for the like-for-like figure.

var benchLimiter = MustCompile(policy.Params{Algorithm: policy.TokenBucket, Limit: 1_000_000, Window: time.Second, Burst: 1_000_000})

const benchKeys = 1 << 20

func benchKey(i int) string { return fmt.Sprintf("{tenant-7f3a|9:client-%d}rule-0001", i) }

func BenchmarkAllowHotKey(b *testing.B) {
	e := NewEngine(EngineConfig{})
	key := benchKey(42)
	now := int64(t0)
	for b.Loop() {
		now++
		e.Allow(key, benchLimiter, Args{Now: now, Cost: 1})
	}
}

func BenchmarkAllowHotKeyWithClock(b *testing.B) {
	e := NewEngine(EngineConfig{})
	key := benchKey(42)
	for b.Loop() {
		e.Allow(key, benchLimiter, Args{Now: time.Now().UnixMicro(), Cost: 1})
	}
}

func BenchmarkAllowHotKeyParallel(b *testing.B) {
	e := NewEngine(EngineConfig{})
	key := benchKey(42)
	var clock atomic.Int64
	clock.Store(t0)
	b.RunParallel(func(pb *testing.PB) {
		now := clock.Add(1)
		for pb.Next() {
			now++
			e.Allow(key, benchLimiter, Args{Now: now, Cost: 1})
		}
	})
}

// filledEngine returns an engine tracking benchKeys keys, and the keys.
func filledEngine(b *testing.B) (*Engine, []string) {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	e := NewEngine(EngineConfig{MaxKeys: 2 * benchKeys})
	for _, k := range keys {
		e.Allow(k, benchLimiter, Args{Now: t0, Cost: 1})
	}
	b.ResetTimer()
	return e, keys
}

func BenchmarkAllow1MKeys(b *testing.B) {
	e, keys := filledEngine(b)
	now, i := int64(t0), 0
	for b.Loop() {
		now++
		i = (i + 7919) & (benchKeys - 1) // a prime stride: no locality
		e.Allow(keys[i], benchLimiter, Args{Now: now, Cost: 1})
	}
}

func BenchmarkAllow1MKeysParallel(b *testing.B) {
	e, keys := filledEngine(b)
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		g := seq.Add(1)
		now, i := t0+g, int(g*104729)
		for pb.Next() {
			now++
			i = (i + 7919) & (benchKeys - 1)
			e.Allow(keys[i], benchLimiter, Args{Now: now, Cost: 1})
		}
	})
}

func BenchmarkXTimeRateAllow(b *testing.B) {
	l := rate.NewLimiter(1_000_000, 1_000_000)
	for b.Loop() {
		l.Allow()
	}
}

func BenchmarkXTimeRateAllowParallel(b *testing.B) {
	l := rate.NewLimiter(1_000_000, 1_000_000)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow()
		}
	})
}

func BenchmarkTimeNow(b *testing.B) {
	var sink int64
	for b.Loop() {
		sink += time.Now().UnixMicro()
	}
	_ = sink
}

// BenchmarkMemoryPerKey reports the heap held per tracked key (B/key) for
// a million token-bucket keys, the keys' own strings excluded.
func BenchmarkMemoryPerKey(b *testing.B) {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	var before, after runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		e := NewEngine(EngineConfig{MaxKeys: 2 * benchKeys})
		for _, k := range keys {
			e.Allow(k, benchLimiter, Args{Now: t0, Cost: 1})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/benchKeys, "B/key")
		runtime.KeepAlive(e)
	}
}
