package limit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

var (
	perSecond5 = MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 5, Window: time.Second})
	perSecond2 = MustCompile(policy.Params{Algorithm: policy.TokenBucket, Limit: 2, Window: time.Second})
)

func TestEngineKeepsStatePerKey(t *testing.T) {
	t.Parallel()
	e := NewEngine(EngineConfig{})
	for i := range 5 {
		if r := e.Allow("a", perSecond5, Args{Now: t0, Cost: 1}); !r.Allowed || r.Remaining != int64(4-i) {
			t.Fatalf("a #%d: %+v", i, r)
		}
	}
	if r := e.Allow("a", perSecond5, Args{Now: t0, Cost: 1}); r.Allowed {
		t.Fatalf("a over the limit: %+v", r)
	}
	if r := e.Allow("b", perSecond5, Args{Now: t0, Cost: 1}); !r.Allowed || r.Remaining != 4 {
		t.Fatalf("b shares a's counter: %+v", r)
	}
	// The same key under another algorithm is another counter.
	if r := e.Allow("a", perSecond2, Args{Now: t0, Cost: 1}); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("a under a token bucket: %+v", r)
	}
	if r := e.Allow("a", perSecond5, Args{Now: t0 + 1000*ms, Cost: 1}); !r.Allowed || r.Remaining != 4 {
		t.Fatalf("a in the next window: %+v", r)
	}
}

// Reset gives a key a fresh limiter and leaves other keys, and the same
// key under another algorithm, as they were.
func TestEngineReset(t *testing.T) {
	t.Parallel()
	e := NewEngine(EngineConfig{})
	for _, key := range []string{"a", "b"} {
		for range 5 {
			e.Allow(key, perSecond5, Args{Now: t0, Cost: 1})
		}
	}
	e.Allow("a", perSecond2, Args{Now: t0, Cost: 1})
	e.Reset("a", perSecond5)
	e.Reset("never-seen", perSecond5)
	if r := e.Allow("a", perSecond5, Args{Now: t0, Cost: 1}); !r.Allowed || r.Remaining != 4 {
		t.Fatalf("a after its reset: %+v", r)
	}
	if r := e.Allow("b", perSecond5, Args{Now: t0, Cost: 1}); r.Allowed {
		t.Fatalf("b, not reset: %+v", r)
	}
	if r := e.Allow("a", perSecond2, Args{Now: t0, Cost: 1}); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("a under the token bucket, not reset: %+v", r)
	}
	if n := e.Stats().Keys; n != 3 {
		t.Fatalf("%d keys tracked, want 3", n)
	}
}

func TestEngineAllOrNothing(t *testing.T) {
	t.Parallel()
	e := NewEngine(EngineConfig{})
	res := make([]Result, 3)
	both := []Request{
		{Key: "per-client", Limiter: perSecond5, Cost: 1},
		{Key: "global", Limiter: perSecond2, Cost: 1},
	}
	for i := range 2 {
		if !e.AllowAll(both, t0, res) {
			t.Fatalf("decision %d rejected: %+v", i, res)
		}
	}
	if e.AllowAll(both, t0, res) || !res[0].Allowed || res[1].Allowed {
		t.Fatalf("third decision: global should reject alone: %+v", res)
	}
	if res[0].Remaining != 3 {
		t.Fatalf("per-client reports %d remaining on a rejected decision, want 3 (nothing consumed)", res[0].Remaining)
	}
	if k := Deciding(both, res, false); k != 1 {
		t.Fatalf("deciding rule %d, want the rejecting one", k)
	}
	// The per-client rule consumed nothing on the rejected decision: 3 left.
	if r := e.Allow("per-client", perSecond5, Args{Now: t0}); r.Remaining != 3 {
		t.Fatalf("per-client after a rejected decision: %+v, want 3 remaining", r)
	}
}

func TestEngineShadowNeverRejects(t *testing.T) {
	t.Parallel()
	e := NewEngine(EngineConfig{})
	res := make([]Result, 2)
	reqs := []Request{
		{Key: "enforced", Limiter: perSecond5, Cost: 1},
		{Key: "shadow", Limiter: perSecond2, Cost: 1, Shadow: true},
	}
	for i := range 4 {
		if !e.AllowAll(reqs, t0, res) {
			t.Fatalf("decision %d rejected by a shadow rule: %+v", i, res)
		}
		if wouldBlock := i >= 2; res[1].Allowed == wouldBlock {
			t.Fatalf("decision %d: shadow answered %+v", i, res[1])
		}
	}
	if k := Deciding(reqs, res, true); k != 0 {
		t.Fatalf("deciding rule %d, want the enforced one", k)
	}
	if r := e.Allow("enforced", perSecond5, Args{Now: t0}); r.Remaining != 1 {
		t.Fatalf("enforced rule: %+v, want 1 remaining", r)
	}
}

func TestEngineSameKeyTwiceInOneDecision(t *testing.T) {
	t.Parallel()
	e := NewEngine(EngineConfig{})
	res := make([]Result, 2)
	reqs := []Request{{Key: "k", Limiter: perSecond5, Cost: 3}, {Key: "k", Limiter: perSecond5, Cost: 3}}
	if e.AllowAll(reqs, t0, res) {
		t.Fatalf("3+3 on a limit of 5 admitted: %+v", res)
	}
	reqs[1].Cost = 2
	if !e.AllowAll(reqs, t0, res) || res[1].Remaining != 0 {
		t.Fatalf("3+2 on a limit of 5: %+v", res)
	}
	if r := e.Allow("k", perSecond5, Args{Now: t0, Cost: 1}); r.Allowed {
		t.Fatalf("both parts must have been stored: %+v", r)
	}
}

func TestEngineMemoryCapEvicts(t *testing.T) {
	t.Parallel()
	const maxKeys = 256
	e := NewEngine(EngineConfig{Shards: 4, MaxKeys: maxKeys})
	const n = 10_000
	for i := range n {
		if r := e.Allow(fmt.Sprintf("client-%d", i), perSecond2, Args{Now: t0, Cost: 1}); !r.Allowed {
			t.Fatalf("new key %d rejected", i)
		}
	}
	st := e.Stats()
	if st.Keys > maxKeys {
		t.Fatalf("tracking %d keys over a cap of %d", st.Keys, maxKeys)
	}
	if st.Evictions+st.Expirations+uint64(st.Keys) != n {
		t.Fatalf("stats %+v do not account for %d keys", st, n)
	}
	if st.Evictions == 0 {
		t.Fatalf("no eviction counted: %+v", st)
	}
}

func TestEngineExpiryAndSweep(t *testing.T) {
	t.Parallel()
	e := NewEngine(EngineConfig{})
	for i := range 100 {
		e.Allow(fmt.Sprintf("k%d", i), perSecond5, Args{Now: t0 + 500*ms, Cost: 5})
	}
	if n := e.Sweep(t0 + 999*ms); n != 0 {
		t.Fatalf("swept %d live keys", n)
	}
	if r := e.Allow("k1", perSecond5, Args{Now: t0 + 999*ms, Cost: 1}); r.Allowed {
		t.Fatalf("k1 before its window ended: %+v", r)
	}
	if n := e.Sweep(t0 + 1000*ms); n != 100 {
		t.Fatalf("swept %d keys at their expiry, want 100", n)
	}
	if st := e.Stats(); st.Keys != 0 || st.Expirations != 100 {
		t.Fatalf("after the sweep: %+v", st)
	}
}

func TestEngineConcurrentExactCount(t *testing.T) {
	t.Parallel()
	for _, p := range allParams() {
		l := MustCompile(p)
		e := NewEngine(EngineConfig{Shards: 2})
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 50 {
					if e.Allow("hot", l, Args{Now: t0, Cost: 1, Lease: int64(g*100 + i)}).Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got, want := admitted.Load(), admitsAtOnce(l); got != want {
			t.Errorf("%s: %d goroutines × 50 at one instant admitted %d, want %d", p.Algorithm, 16, got, want)
		}
	}
}

func TestEngineConcurrencyRelease(t *testing.T) {
	t.Parallel()
	l := MustCompile(policy.Params{Algorithm: policy.Concurrency, Limit: 1, LeaseTTL: time.Minute})
	e := NewEngine(EngineConfig{})
	if !e.Allow("db", l, Args{Now: t0, Cost: 1, Lease: 7}).Allowed {
		t.Fatal("first lease refused")
	}
	if e.Allow("db", l, Args{Now: t0, Cost: 1, Lease: 8}).Allowed {
		t.Fatal("second lease admitted over the limit")
	}
	e.Release("db", l, t0, 7)
	if !e.Allow("db", l, Args{Now: t0, Cost: 1, Lease: 8}).Allowed {
		t.Fatal("lease refused after release")
	}
}

func TestEngineSteadyStateDoesNotAllocate(t *testing.T) {
	e := NewEngine(EngineConfig{})
	for _, p := range allParams() {
		l := MustCompile(p)
		now := int64(t0)
		e.Allow("warm", l, Args{Now: now, Cost: 1, Lease: 1})
		allocs := testing.AllocsPerRun(200, func() {
			now += 1000 // 1 ms: some admitted, some not
			e.Allow("warm", l, Args{Now: now, Cost: 1, Lease: now % 3})
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per check on an existing key", p.Algorithm, allocs)
		}
	}
}

// admitsAtOnce counts the cost-1 requests (distinct leases) a fresh limiter
// admits at one instant, one after the other.
func admitsAtOnce(l *Limiter) int64 {
	var s State
	for n := int64(0); ; n++ {
		ns, r := l.Eval(s, Args{Now: t0, Cost: 1, Lease: n}, nil)
		if !r.Allowed {
			return n
		}
		s = ns
	}
}
