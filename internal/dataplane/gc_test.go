package dataplane

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestTuneLeavesAnOperatorsSettings(t *testing.T) {
	prevPercent, prevLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(prevPercent); debug.SetMemoryLimit(prevLimit) })
	for _, env := range []map[string]string{{"GOGC": "150"}, {"GOMEMLIMIT": "2GiB"}} {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
		stop := TuneGC(func(k string) string { return env[k] })
		runtime.GC()
		stop()
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("%v: GC percent %d, want the operator's", env, got)
		}
		if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
			t.Errorf("%v: memory limit %d, want the operator's", env, got)
		}
	}
}

// TestTuneKeepsAHeapFloor: with a live heap of a few MB, GOGC is raised
// after each collection so that the next is due at 128 MiB, not at
// 5 × the live heap; the soft limit is 1 GiB; stop ends the adjustments.
func TestTuneKeepsAHeapFloor(t *testing.T) {
	prevPercent, prevLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(prevPercent); debug.SetMemoryLimit(prevLimit) })
	stop := TuneGC(func(string) string { return "" })
	if got := debug.SetMemoryLimit(-1); got != gcSoftLimit {
		t.Errorf("memory limit %d, want %d", got, gcSoftLimit)
	}
	// The first adjustment is made at once; after a collection the cleanup
	// makes it again: set GOGC back and wait for it to be raised.
	debug.SetGCPercent(100)
	for deadline := time.Now().Add(10 * time.Second); ; {
		runtime.GC()
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		if p > gcPercent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC stayed %d after collections; want it raised above %d", p, gcPercent)
		}
		runtime.Gosched()
	}
	stop()
	// Stopped: once the cleanup armed before stop has run (a collection or
	// two), GOGC is left alone.
	runtime.GC()
	runtime.GC()
	debug.SetGCPercent(100)
	runtime.GC()
	runtime.GC()
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GOGC %d after stop, want 100 left alone", p)
	}
}

func TestGCPercentFor(t *testing.T) {
	for _, tc := range []struct {
		live, floor uint64
		percent     int
		want        int
	}{
		{4 << 20, 128 << 20, 400, 3100},  // goal 128 MiB
		{100 << 20, 128 << 20, 400, 400}, // 500 MiB is above the floor
		{32 << 20, 128 << 20, 400, 400},  // exactly 160 MiB: above
		{25 << 20, 128 << 20, 400, 412},  // 125 MiB, just below: raised to reach the floor
		{1 << 20, 128 << 20, 400, 12700}, // the smallest live heap adjust uses
	} {
		if got := gcPercentFor(tc.live, tc.floor, tc.percent); got != tc.want {
			t.Errorf("live %d MiB: GOGC %d, want %d", tc.live>>20, got, tc.want)
		}
	}
}
