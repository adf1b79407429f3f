package decide

import (
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/policy"
)

// indexFrom is the size from which a tier's rules are indexed: below it,
// trying each rule's match costs less than looking it up.
const indexFrom = 16

// ruleIndex finds the rules of a large tier that a request may meet
// without trying every rule's match: a tier of a thousand rules (imported
// routes, Unkey's overrides kept as rules) tried rule by rule costs tens
// of microseconds a decision.
type ruleIndex struct {
	// byValue lists, for a descriptor and a value, the rules whose
	// conditions on that descriptor (their index key) all name values
	// without '*', under each of those values: such a rule can hold only
	// for a request carrying one of them.
	byValue map[overrideKey][]int32
	// always lists the rules with no such descriptor: an empty match, or
	// patterns only. They are tried for every request.
	always []int32
}

// newRuleIndex indexes rules, or returns nil for a tier small enough to
// try rule by rule. Each rule is listed under the descriptor of its
// literal conditions that the fewest other rules share values of
// (identifier=user_42 rather than the namespace=api of a thousand rules).
func newRuleIndex(rules []compiledRule) *ruleIndex {
	if len(rules) < indexFrom {
		return nil
	}
	shared := map[overrideKey]int{} // rules per literal condition
	for i := range rules {
		for _, m := range rules[i].Match {
			if literal(rules[i].Match, m.Key) {
				shared[overrideKey{m.Key, m.Value}]++
			}
		}
	}
	x := &ruleIndex{byValue: map[overrideKey][]int32{}}
	for i := range rules {
		key, best := "", 0
		for _, m := range rules[i].Match {
			if !literal(rules[i].Match, m.Key) {
				continue
			}
			n := 0 // the rules a request meeting this condition tries
			for _, o := range rules[i].Match {
				if o.Key == m.Key {
					n += shared[overrideKey{o.Key, o.Value}]
				}
			}
			if key == "" || n < best {
				key, best = m.Key, n
			}
		}
		if key == "" {
			x.always = append(x.always, int32(i))
			continue
		}
		for _, m := range rules[i].Match {
			if m.Key == key {
				k := overrideKey{key, m.Value}
				if l := x.byValue[k]; len(l) == 0 || l[len(l)-1] != int32(i) { // a value given twice, once
					x.byValue[k] = append(l, int32(i))
				}
			}
		}
	}
	return x
}

// literal reports whether match's conditions on descriptor key all name
// values without '*': a rule can hold only for a request carrying one.
func literal(match []policy.Match, key string) bool {
	return !slices.ContainsFunc(match, func(n policy.Match) bool { return n.Key == key && strings.Contains(n.Value, "*") })
}

// candidates appends to dst, in the tier's order, the indexes of the rules
// a request of descriptors d may meet: every rule when x is nil (a small
// tier), else those the index finds. Each still has its match tried.
func (x *ruleIndex) candidates(n int, d policy.Descriptors, dst []int32) []int32 {
	if x == nil {
		return every(n, dst)
	}
	dst = append(dst, x.always...)
	for _, e := range d {
		dst = append(dst, x.byValue[overrideKey{e.Key, e.Value}]...)
	}
	slices.Sort(dst)
	return slices.Compact(dst) // a key given twice in d would list its rules twice
}

// every appends 0 to n-1 to dst: the candidates of a list too small to
// index.
func every(n int, dst []int32) []int32 {
	for i := range n {
		dst = append(dst, int32(i))
	}
	return dst
}
