package decide

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/policy"
)

// The index finds every rule a request meets, as trying each rule would:
// random tiers of literal, prefix, suffix and any-value conditions, some
// keys given twice, against random requests.
func TestRuleIndexFindsWhatAScanFinds(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(7, 11))
	keys := []string{"a", "b", "c", "d"}
	values := []string{"x", "y", "z", "x*", "*z", "*", "xy", "x*z", "*y*", "xy*", "*yz"}
	for round := range 300 {
		rules := make([]compiledRule, indexFrom+rnd.IntN(40))
		for i := range rules {
			for range rnd.IntN(4) {
				rules[i].Match = append(rules[i].Match, policy.Match{Key: keys[rnd.IntN(len(keys))], Value: values[rnd.IntN(len(values))]})
			}
		}
		x := newRuleIndex(rules)
		if x == nil {
			t.Fatal("a tier of indexFrom rules or more is not indexed")
		}
		for range 50 {
			var d policy.Descriptors
			for _, k := range keys {
				if rnd.IntN(3) > 0 {
					d = append(d, policy.Descriptor{Key: k, Value: []string{"x", "y", "z", "xy", "xz", "q"}[rnd.IntN(6)]})
				}
			}
			var scan, indexed []int32
			for i := range rules {
				if rules[i].Matches(d) {
					scan = append(scan, int32(i))
				}
			}
			for _, i := range x.candidates(len(rules), d, nil) {
				if rules[i].Matches(d) {
					indexed = append(indexed, i)
				}
			}
			if !slices.Equal(scan, indexed) {
				t.Fatalf("round %d, request %v: the index finds %v, a scan %v (rules %v)", round, d, indexed, scan, fmt.Sprint(rules))
			}
		}
	}
}
