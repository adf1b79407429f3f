package dataplane

import "runtime/debug"

// TuneGC collects a decider's garbage less often than Go's default, unless
// GOGC or GOMEMLIMIT says how: GOGC=400 under a 1 GiB soft memory limit.
// A decider's live heap is small (config snapshots,
// the in-process engine's fallback counters, at most ~100 MB) and it
// allocates on every decision, so at GOGC=100 it collects many times a
// second, and each collection also shrinks the stacks of idle gRPC call
// goroutines, which the next call grows again: 11-13% of the decider's
// CPU under load, 3% at GOGC=400 (docs/benchmarks.md). The soft limit
// bounds what the wider margin may cost.
func TuneGC(getenv func(string) string) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(400)
	debug.SetMemoryLimit(1 << 30)
}
