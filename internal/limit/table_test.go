package limit

import (
	"math/rand/v2"
	"testing"
)

// The table agrees with a Go map through random inserts and removals,
// including runs that wrap around and keys crowding one home slot.
func TestTableAgreesWithAMap(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 50 {
		var tb table
		ref := map[uint64]int64{}
		keyOf := func() uint64 {
			if round%2 == 0 {
				return uint64(rng.IntN(64))<<8 | 7 // few homes: long runs
			}
			return rng.Uint64() | 1
		}
		for op := range 3000 {
			h := keyOf()
			i, found := tb.find(h)
			if _, want := ref[h]; found != want {
				t.Fatalf("round %d op %d: find(%x) = %v, map says %v", round, op, h, found, want)
			}
			switch {
			case found && rng.IntN(2) == 0:
				tb.removeAt(i)
				delete(ref, h)
			case found:
				tb.slots[i].exp = int64(op)
				ref[h] = int64(op)
			default:
				tb.insert(slot{h: h, exp: int64(op)})
				ref[h] = int64(op)
			}
			if tb.n != len(ref) {
				t.Fatalf("round %d op %d: %d entries, map has %d", round, op, tb.n, len(ref))
			}
		}
		for h, exp := range ref {
			if i, ok := tb.find(h); !ok || tb.slots[i].exp != exp {
				t.Fatalf("round %d: lost %x", round, h)
			}
		}
	}
}
