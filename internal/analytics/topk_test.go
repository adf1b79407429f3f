package analytics

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestMergeTopIsExactBelowCapacity(t *testing.T) {
	t.Parallel()
	var tracked []counter
	tracked = mergeTop(tracked, map[string]int64{"a": 3, "b": 1}, 3)
	tracked = mergeTop(tracked, map[string]int64{"a": 2, "c": 4}, 3)
	want := map[string]int64{"a": 5, "b": 1, "c": 4}
	if len(tracked) != 3 {
		t.Fatalf("tracked %v, want 3 counters", tracked)
	}
	for _, c := range tracked {
		if c.rejected != want[c.client] || c.error != 0 {
			t.Errorf("%s: %d±%d, want %d exactly", c.client, c.rejected, c.error, want[c.client])
		}
	}
}

func TestMergeTopReplacesTheSmallest(t *testing.T) {
	t.Parallel()
	tracked := mergeTop(nil, map[string]int64{"a": 5, "b": 2}, 2)
	tracked = mergeTop(tracked, map[string]int64{"c": 1}, 2)
	slices.SortFunc(tracked, func(x, y counter) int { return int(y.rejected - x.rejected) })
	want := []counter{{"a", 5, 0}, {"c", 3, 2}}
	if !slices.Equal(tracked, want) {
		t.Fatalf("tracked %v, want %v", tracked, want)
	}
}

// TestMergeTopGuarantees checks space-saving's guarantees against exact
// counts over many random batches: counts never under the truth, never
// over it by more than their error, and every client with more than
// total/capacity rejections tracked.
func TestMergeTopGuarantees(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		const capacity = 10
		exact := map[string]int64{}
		var tracked []counter
		var total int64
		for range 50 {
			batch := map[string]int64{}
			for range 1 + rng.IntN(40) {
				// a skewed population: a few heavy clients, many light ones
				c := fmt.Sprintf("c%d", int(rng.ExpFloat64()*8))
				batch[c]++
				exact[c]++
				total++
			}
			tracked = mergeTop(tracked, batch, capacity)
			if len(tracked) > capacity {
				t.Fatalf("seed %d: %d counters, capacity %d", seed, len(tracked), capacity)
			}
		}
		seen := map[string]bool{}
		for _, c := range tracked {
			seen[c.client] = true
			if c.rejected < exact[c.client] || c.rejected-c.error > exact[c.client] {
				t.Errorf("seed %d: %s counted %d±%d, truth %d", seed, c.client, c.rejected, c.error, exact[c.client])
			}
		}
		for c, n := range exact {
			if n > total/capacity && !seen[c] {
				t.Errorf("seed %d: heavy client %s (%d of %d) not tracked", seed, c, n, total)
			}
		}
	}
}
