package redisengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// What other regions spent of a global limit (limit.Request.Spent) counts
// in Redis's scripts as in the in-process engine: a fixed or sliding
// window admits while its own count, the spent units and the cost fit,
// and says what remains of the limit after them.
func TestSpentCountsAsInProcess(t *testing.T) {
	t.Parallel()
	rc, prefix := redistest.Client(t)
	ctx := context.Background()
	for _, alg := range []policy.Algorithm{policy.FixedWindow, policy.SlidingWindow} {
		for _, spent := range []int64{0, 3, 10, 14} {
			lim, err := limit.Compile(policy.Params{Algorithm: alg, Limit: 10, Window: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			eng := redisengine.New(rc, redisengine.Config{Prefix: prefix})
			local := limit.NewEngine(limit.EngineConfig{})
			now := time.Date(2026, 11, 29, 12, 0, 30, 0, time.UTC).UnixMicro()
			key := alg.String() + "-" + string(rune('a'+spent))
			admitted := int64(0)
			for i := range 12 {
				reqs := []limit.Request{{Key: key, Limiter: lim, Cost: 1, Spent: spent}}
				res, want := make([]limit.Result, 1), make([]limit.Result, 1)
				got, err := eng.AllowAllAt(ctx, reqs, now+int64(i), res)
				if err != nil {
					t.Fatal(err)
				}
				wantOK := local.AllowAll(reqs, now+int64(i), want)
				if got != wantOK || res[0].Remaining != want[0].Remaining {
					t.Fatalf("%v, spent %d, check %d: Redis %v (remaining %d), in process %v (remaining %d)",
						alg, spent, i, got, res[0].Remaining, wantOK, want[0].Remaining)
				}
				if got {
					admitted++
				}
			}
			if want := max(10-spent, 0); admitted != want {
				t.Fatalf("%v, spent %d: admitted %d of 12, want %d", alg, spent, admitted, want)
			}
		}
	}
}

// Another region's admissions charge a meter once per rise of each run's
// count, however many deciders send them: a GCRA of 10 a minute charged 4
// twice, then 6, admits 4 of 10 checks.
func TestChargeRemoteOncePerRise(t *testing.T) {
	t.Parallel()
	rc, prefix := redistest.Client(t)
	ctx := context.Background()
	lim, err := limit.Compile(policy.Params{Algorithm: policy.GCRA, Limit: 10, Window: time.Minute, Burst: 10})
	if err != nil {
		t.Fatal(err)
	}
	interval, ok := lim.Meter()
	if !ok {
		t.Fatal("a GCRA is not a meter")
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	eng := redisengine.New(rc, redisengine.Config{Prefix: prefix, Now: func() time.Time { return now }})
	for _, n := range []int64{4, 4, 6} {
		if err := eng.ChargeRemote(ctx, []redisengine.RemoteCharge{{Key: "k", Run: "west-1@0", Count: n, Interval: interval}}); err != nil {
			t.Fatal(err)
		}
	}
	admitted := 0
	for range 10 {
		res := make([]limit.Result, 1)
		ok, err := eng.AllowAllAt(ctx, []limit.Request{{Key: "k", Limiter: lim, Cost: 1}}, now.UnixMicro(), res)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	if admitted != 4 {
		t.Fatalf("admitted %d of 10 after another region's 6, want 4", admitted)
	}
}
