package analytics

import (
	"cmp"
	"slices"
)

// MaxClientCount bounds a client's rejections in one top-clients group (a
// rule's hour), at which its count stays: 2^49, so that the sums the
// reports make of up to 400 days of hours (9,600 of them) cannot overflow
// a bigint, whatever costs the checks claimed. An event counts at most
// policy.MaxLimit, the largest limit, so that even a busy hour's counts
// are exact far below it.
const MaxClientCount = 1 << 49

// addCount is a + b (neither negative) held at MaxClientCount.
func addCount(a, b int64) int64 {
	return min(min(a, MaxClientCount)+min(b, MaxClientCount), MaxClientCount)
}

// counter is one tracked client of a top-clients group.
type counter struct {
	client          string
	rejected, error int64
}

// mergeTop folds a batch's exact per-client counts into a group's tracked
// counters with the space-saving algorithm, keeping at most capacity
// counters: a tracked client adds its count; a new one takes a free slot,
// or replaces the smallest counter, inheriting its count as error. Any
// client with more than total/capacity rejections is kept, and no count is
// under the truth. Batch clients are taken largest first, and ties by name,
// so the result does not depend on map order.
func mergeTop(tracked []counter, batch map[string]int64, capacity int) []counter {
	add := make([]counter, 0, len(batch))
	for c, n := range batch {
		add = append(add, counter{client: c, rejected: n})
	}
	slices.SortFunc(add, func(a, b counter) int {
		return cmp.Or(cmp.Compare(b.rejected, a.rejected), cmp.Compare(a.client, b.client))
	})
	index := make(map[string]int, len(tracked)+len(add))
	for i, c := range tracked {
		index[c.client] = i
	}
	for _, a := range add {
		if i, ok := index[a.client]; ok {
			tracked[i].rejected = addCount(tracked[i].rejected, a.rejected)
			continue
		}
		if len(tracked) < capacity {
			index[a.client] = len(tracked)
			tracked = append(tracked, a)
			continue
		}
		m := 0
		for i := range tracked {
			if tracked[i].rejected < tracked[m].rejected ||
				(tracked[i].rejected == tracked[m].rejected && tracked[i].client > tracked[m].client) {
				m = i
			}
		}
		delete(index, tracked[m].client)
		index[a.client] = m
		n := addCount(tracked[m].rejected, a.rejected)
		// The error is what the replaced counter held; under its new count
		// even where both are held at the bound.
		tracked[m] = counter{client: a.client, rejected: n, error: min(tracked[m].rejected, n-1)}
	}
	return tracked
}
