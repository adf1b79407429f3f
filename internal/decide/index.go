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
	// byValue lists each rule under the values its conditions on one
	// descriptor (its index key) stand for: literal values, and the
	// literal prefixes ("/orders/*") or suffixes ("*.example.com") of its
	// patterns. Such a rule can hold only for a request whose value of
	// that descriptor is, starts or ends with one of them.
	byValue *affixIndex
	// always lists the rules with no such descriptor: an empty match, or
	// patterns beginning and ending with a star only. They are tried for
	// every request.
	always []int32
}

// newRuleIndex indexes rules, or returns nil for a tier small enough to
// try rule by rule. Each rule is listed under the descriptor of its
// conditions that the fewest other rules share values of
// (identifier=user_42 rather than the namespace=api of a thousand rules).
func newRuleIndex(rules []compiledRule) *ruleIndex {
	if len(rules) < indexFrom {
		return nil
	}
	shared := map[affixEntry]int{} // rules per indexable condition
	for i := range rules {
		for _, m := range rules[i].Match {
			if e, ok := affixOf(m.Key, m.Value); ok {
				shared[e]++
			}
		}
	}
	x := &ruleIndex{byValue: newAffixIndex()}
	for i := range rules {
		match := rules[i].Match
		key, best := "", 0
		for _, m := range match {
			n, ok := 0, true // the rules a request meeting m's descriptor's conditions tries
			for _, o := range match {
				if o.Key == m.Key {
					e, indexable := affixOf(o.Key, o.Value)
					ok = ok && indexable
					n += shared[e]
				}
			}
			if ok && (key == "" || n < best) {
				key, best = m.Key, n
			}
		}
		if key == "" {
			x.always = append(x.always, int32(i))
			continue
		}
		for _, m := range match {
			if m.Key == key {
				x.byValue.add(m.Key, m.Value, int32(i))
			}
		}
	}
	x.byValue.done()
	return x
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
		dst = x.byValue.lookup(e.Key, e.Value, dst)
	}
	slices.Sort(dst)
	// A rule listed under two of its values, or a key given twice in d,
	// is found twice.
	return slices.Compact(dst)
}

// every appends 0 to n-1 to dst: the candidates of a list too small to
// index.
func every(n int, dst []int32) []int32 {
	for i := range n {
		dst = append(dst, int32(i))
	}
	return dst
}

// affixKind is the shape of a match value or an override identifier
// (policy.Glob) that an affixIndex can look up.
type affixKind uint8

const (
	affixLiteral affixKind = iota // no '*': the value itself
	affixPrefix                   // one '*', last: "abc*", any value starting "abc"
	affixSuffix                   // one '*', first: "*abc", any value ending "abc"
)

// affixEntry is a pattern of descriptor key as an affixIndex lists it.
type affixEntry struct {
	kind    affixKind
	key     string
	literal string // the pattern without its '*'
}

// affixOf returns the entry pattern is listed under: the value itself
// for a pattern without '*', else the bytes before its first star (a
// prefix every value it matches starts with) or those after its last (a
// suffix they end with), whichever is longer ("a*@example.com" under the
// suffix "@example.com"). A pattern beginning and ending with a star
// ("*.example.*", "*") has neither, and no affixIndex lists it: false.
func affixOf(key, pattern string) (affixEntry, bool) {
	first := strings.IndexByte(pattern, '*')
	if first < 0 {
		return affixEntry{affixLiteral, key, pattern}, true
	}
	last := strings.LastIndexByte(pattern, '*')
	prefix, suffix := pattern[:first], pattern[last+1:]
	switch {
	case first == len(pattern)-1: // "abc*", and "*": every value, under the empty prefix
		return affixEntry{affixPrefix, key, prefix}, true
	case prefix == "" && suffix == "":
		return affixEntry{}, false
	case len(prefix) >= len(suffix):
		return affixEntry{affixPrefix, key, prefix}, true
	}
	return affixEntry{affixSuffix, key, suffix}, true
}

// affixIndex lists entries (the indexes of rules or overrides) under the
// patterns of descriptor values they stand for, and finds those of a
// value by looking it up whole, and its prefixes and suffixes of the
// lengths the key's patterns have: a few map reads in place of trying
// every pattern. Build it with add, then done; lookups may then run
// concurrently.
type affixIndex struct {
	entries  map[affixEntry][]int32
	literals bool // some entry is of a literal: lookups read v whole
	// lens holds, by descriptor key, the lengths of its prefix and
	// suffix patterns' literals, ascending.
	prefixLens, suffixLens map[string][]int
}

func newAffixIndex() *affixIndex {
	return &affixIndex{entries: map[affixEntry][]int32{}, prefixLens: map[string][]int{}, suffixLens: map[string][]int{}}
}

// add lists i under pattern of descriptor key and reports whether it
// could: a pattern of another shape is the caller's to try.
func (a *affixIndex) add(key, pattern string, i int32) bool {
	e, ok := affixOf(key, pattern)
	if !ok {
		return false
	}
	if l := a.entries[e]; len(l) == 0 || l[len(l)-1] != i { // a pattern given twice, once
		a.entries[e] = append(l, i)
	}
	switch e.kind {
	case affixLiteral:
		a.literals = true
	case affixPrefix:
		a.prefixLens[key] = append(a.prefixLens[key], len(e.literal))
	case affixSuffix:
		a.suffixLens[key] = append(a.suffixLens[key], len(e.literal))
	}
	return true
}

// done sorts the lengths lookups go through.
func (a *affixIndex) done() {
	for _, m := range []map[string][]int{a.prefixLens, a.suffixLens} {
		for k, l := range m {
			slices.Sort(l)
			m[k] = slices.Compact(l)
		}
	}
}

// lookup appends to dst the entries listed under a pattern that value v
// of descriptor key meets, in no particular order.
func (a *affixIndex) lookup(key, v string, dst []int32) []int32 {
	if a.literals {
		dst = append(dst, a.entries[affixEntry{affixLiteral, key, v}]...)
	}
	for _, l := range a.prefixLens[key] {
		if l > len(v) {
			break
		}
		dst = append(dst, a.entries[affixEntry{affixPrefix, key, v[:l]}]...)
	}
	for _, l := range a.suffixLens[key] {
		if l > len(v) {
			break
		}
		dst = append(dst, a.entries[affixEntry{affixSuffix, key, v[len(v)-l:]}]...)
	}
	return dst
}
