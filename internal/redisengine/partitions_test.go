package redisengine

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// partitionArg is a limit.Partition of partition of, among shares, as the
// decider writes it.
func partitionArg(of int, shares []float64) *limit.Partition {
	arg := strconv.Itoa(of)
	for _, s := range shares {
		arg += ":" + strconv.FormatFloat(s, 'g', -1, 64)
	}
	return &limit.Partition{Arg: arg}
}

// Property: whatever the shares, the partitions asking, the releases and
// the leases expiring, a partitioned adaptive limit never has more leases
// in flight than the limit. Each lease the script admits is checked
// against the test's own account of the leases alive.
func TestPartitionsNeverPassTheLimit(t *testing.T) {
	t.Parallel()
	c, prefix := redistest.Client(t)
	e := New(c, Config{Prefix: prefix})
	t.Cleanup(e.Close)
	ctx := context.Background()
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 7))
		lim := 1 + rng.Int64N(20)
		shares := make([]float64, 1+rng.IntN(3))
		left := 1.0
		for i := range shares {
			shares[i] = math.Round(rng.Float64()*left*100) / 100
			if shares[i] == 0 {
				shares[i] = 0.01
			}
			left = max(left-shares[i], 0)
		}
		if sum := func() (s float64) {
			for _, v := range shares {
				s += v
			}
			return s
		}(); sum > 1 {
			shares = shares[:1]
		}
		l := limit.MustCompile(policy.Params{Algorithm: policy.AdaptiveConcurrency, Limit: lim, Window: 100 * time.Millisecond, LeaseTTL: 50 * time.Millisecond})
		key := "{prop-" + strconv.FormatUint(seed, 10) + "}"
		type held struct{ lease, until, cost int64 }
		var alive []held
		now := time.Now().UnixMicro()
		var next int64 = 1
		for step := range 300 {
			now += rng.Int64N(5_000)
			live := alive[:0]
			for _, h := range alive {
				if h.until > now {
					live = append(live, h)
				}
			}
			alive = live
			switch {
			case len(alive) > 0 && rng.IntN(3) == 0: // a release
				i := rng.IntN(len(alive))
				if err := e.ReleaseAt(ctx, key, l, now, alive[i].lease); err != nil {
					t.Fatal(err)
				}
				alive = append(alive[:i], alive[i+1:]...)
			default: // a lease of a partition
				cost := 1 + rng.Int64N(2)
				res := make([]limit.Result, 1)
				of := rng.IntN(len(shares) + 1)
				ok, err := e.AllowAllAt(ctx, []limit.Request{{Key: key, Limiter: l, Cost: cost, Lease: next, Partition: partitionArg(of, shares)}}, now, res)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					alive = append(alive, held{next, now + 50_000, cost})
				}
				next++
				var inFlight int64
				for _, h := range alive {
					inFlight += h.cost
				}
				if inFlight > lim || ok && res[0].Remaining != lim-inFlight {
					t.Fatalf("seed %d, step %d: %d in flight of a limit of %d (shares %v), the script says %d remain", seed, step, inFlight, lim, shares, res[0].Remaining)
				}
			}
		}
	}
}

// Under contention, each partition holds its share of the limit, ± 5% of
// it: three partitions of 50%, 30% and 20% of 100, each with more
// requests waiting than the whole limit, on virtual time.
func TestPartitionsKeepTheirSharesUnderContention(t *testing.T) {
	t.Parallel()
	c, prefix := redistest.Client(t)
	e := New(c, Config{Prefix: prefix})
	t.Cleanup(e.Close)
	ctx := context.Background()
	shares := []float64{0.5, 0.3, 0.2}
	const lim, service = 100, 20_000 // µs
	l := limit.MustCompile(policy.Params{Algorithm: policy.AdaptiveConcurrency, Limit: lim, Window: 100 * time.Millisecond, LeaseTTL: time.Second})
	type held struct{ lease, until int64 }
	holding := make([][]held, len(shares)+1) // by partition; 0, the rest, asks nothing
	now := time.Now().UnixMicro()
	var next int64 = 1
	var total [4]float64
	const ms = 1000
	steps := 0
	for step := range 400 {
		now += ms
		for q := 1; q <= len(shares); q++ {
			keep := holding[q][:0]
			for _, h := range holding[q] {
				if h.until <= now {
					if err := e.ReleaseAt(ctx, "{shared}", l, now, h.lease); err != nil {
						t.Fatal(err)
					}
					continue
				}
				keep = append(keep, h)
			}
			holding[q] = keep
		}
		// Each partition asks until refused, in turn, a different one first
		// each millisecond.
		for k := range len(shares) {
			q := 1 + (step+k)%len(shares)
			for {
				res := make([]limit.Result, 1)
				ok, err := e.AllowAllAt(ctx, []limit.Request{{Key: "{shared}", Limiter: l, Cost: 1, Lease: next, Partition: partitionArg(q, shares)}}, now, res)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				holding[q] = append(holding[q], held{next, now + service})
				next++
			}
		}
		if step >= 100 { // past the start, when the first to ask took all
			steps++
			for q := 1; q <= len(shares); q++ {
				total[q] += float64(len(holding[q]))
			}
		}
	}
	for q := 1; q <= len(shares); q++ {
		mean, want := total[q]/float64(steps), shares[q-1]*lim
		t.Logf("partition %d: %.1f in flight on average, its share %.0f", q, mean, want)
		if math.Abs(mean-want) > 0.05*want {
			t.Errorf("partition %d held %.1f on average, want its share %.0f ± 5%%", q, mean, want)
		}
	}
}

// A partition alone borrows what the others leave idle: the whole limit.
func TestAPartitionAloneBorrowsTheIdleShares(t *testing.T) {
	t.Parallel()
	c, prefix := redistest.Client(t)
	e := New(c, Config{Prefix: prefix})
	t.Cleanup(e.Close)
	l := limit.MustCompile(policy.Params{Algorithm: policy.AdaptiveConcurrency, Limit: 10, Window: 100 * time.Millisecond, LeaseTTL: time.Minute})
	now := time.Now().UnixMicro()
	admitted := 0
	for i := range 12 {
		ok, err := e.AllowAllAt(context.Background(), []limit.Request{{Key: "{alone}", Limiter: l, Cost: 1, Lease: int64(i + 1),
			Partition: partitionArg(1, []float64{0.3, 0.3})}}, now, make([]limit.Result, 1))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("a partition of 30%% alone took %d of 10", admitted)
	}
}
