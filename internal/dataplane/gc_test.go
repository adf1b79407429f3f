package dataplane

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestTuneGCLeavesAnOperatorsSettings(t *testing.T) {
	prevPercent, prevLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(prevPercent); debug.SetMemoryLimit(prevLimit) })
	for _, tc := range []struct {
		env     map[string]string
		percent int
		limit   int64
	}{
		{map[string]string{}, 400, 1 << 30},
		{map[string]string{"GOGC": "150"}, 100, math.MaxInt64},
		{map[string]string{"GOMEMLIMIT": "2GiB"}, 100, math.MaxInt64},
	} {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
		TuneGC(func(k string) string { return tc.env[k] })
		if got := debug.SetGCPercent(100); got != tc.percent {
			t.Errorf("%v: GC percent %d, want %d", tc.env, got, tc.percent)
		}
		if got := debug.SetMemoryLimit(-1); got != tc.limit {
			t.Errorf("%v: memory limit %d, want %d", tc.env, got, tc.limit)
		}
	}
}
