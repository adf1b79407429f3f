package dataplane

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Garbage collection of a decider, unless GOGC or GOMEMLIMIT says how
// (see TuneGC).
const (
	gcPercent   = 400       // GOGC, at least
	gcHeapFloor = 128 << 20 // the heap a collection is never due below
	gcSoftLimit = 1 << 30   // GOMEMLIMIT
)

// TuneGC collects a decider's garbage less often than Go's default, unless
// GOGC or GOMEMLIMIT says how: GOGC=400, raised after each collection so
// that the next is not due before the heap reaches 128 MiB, under a 1 GiB
// soft memory limit. A decider's live heap is small (config snapshots,
// counters, a few MB in a benchmark, at most ~100 MB) and it allocates on
// every decision: at GOGC=100 it collected many times a second, and each
// collection also shrinks the stacks of idle gRPC call goroutines, which
// the next call grows again (11-13% of the decider's CPU under load); at
// GOGC=400 a live heap of 4 MB was still collected 20 times a second (7%
// of a core); with the floor, about twice (docs/benchmarks.md). The soft
// limit bounds what the wider margin may cost. The returned stop ends the
// adjustments (the settings stay as they are).
func TuneGC(getenv func(string) string) (stop func()) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	debug.SetMemoryLimit(gcSoftLimit)
	h := &heapFloor{floor: gcHeapFloor, percent: gcPercent}
	h.adjust()
	h.arm()
	return func() { h.stopped.Store(true) }
}

// heapFloor sets GOGC after every collection so that the next one is due
// at the larger of floor and what percent alone would give.
type heapFloor struct {
	floor   uint64
	percent int
	stopped atomic.Bool
}

// sentinel is an object whose collection marks the end of a GC cycle; it
// holds a pointer so that it is not one of the tiny allocator's shared
// blocks, whose cleanups may never run.
type sentinel struct{ _ *int }

// arm runs h.collected once the next collection has found a fresh
// sentinel unreachable.
func (h *heapFloor) arm() {
	runtime.AddCleanup(&sentinel{}, (*heapFloor).collected, h)
}

func (h *heapFloor) collected() {
	if h.stopped.Load() {
		return
	}
	h.adjust()
	h.arm()
}

// adjust sets GOGC from the live heap the last collection left.
func (h *heapFloor) adjust() {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	var live uint64 = 1 << 20
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = max(live, s[0].Value.Uint64())
	}
	debug.SetGCPercent(gcPercentFor(live, h.floor, h.percent))
}

// gcPercentFor is the GOGC that makes the heap goal of a live heap the
// larger of floor and live × (1 + percent/100).
func gcPercentFor(live, floor uint64, percent int) int {
	if live*uint64(100+percent)/100 >= floor {
		return percent
	}
	return int(floor*100/live) - 100
}
