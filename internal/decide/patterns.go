package decide

import (
	"slices"
	"strings"
)

// patternsFrom is the number of pattern overrides from which they are
// indexed: below it, trying each pattern costs less than looking it up.
const patternsFrom = 16

// patternIndex finds the pattern overrides (a '*' in the identifier) that
// an identifier may meet without trying every pattern: a tenant may hold
// up to policy.MaxOverrides of them, and trying ten thousand cost a
// quarter of a millisecond a decision. Prefixes ("cust-42-*") and
// suffixes ("*@example.com"), the common patterns, are looked up by the
// identifier's own prefixes and suffixes of the lengths the patterns
// have; the rest are tried one by one. Entries are ranks in
// Config.patterns, whose order decides which override wins.
type patternIndex struct {
	prefixes   map[overrideKey][]int32 // under the pattern's literal prefix
	prefixLens []int                   // the lengths of those prefixes, ascending
	suffixes   map[overrideKey][]int32 // under the pattern's literal suffix
	suffixLens []int
	other      []int32 // patterns of any other shape (a '*' inside, or several)
}

// newPatternIndex indexes patterns (Config.patterns, in their order), or
// returns nil for so few that they are tried one by one.
func newPatternIndex(patterns []*compiledOverride) *patternIndex {
	if len(patterns) < patternsFrom {
		return nil
	}
	x := &patternIndex{prefixes: map[overrideKey][]int32{}, suffixes: map[overrideKey][]int32{}}
	for i, o := range patterns {
		id, key := o.Identifier, o.IdentifierKey()
		switch star := strings.IndexByte(id, '*'); {
		case strings.Count(id, "*") != 1:
			x.other = append(x.other, int32(i))
		case star == len(id)-1:
			k := overrideKey{key, id[:star]}
			x.prefixes[k] = append(x.prefixes[k], int32(i))
			x.prefixLens = append(x.prefixLens, star)
		case star == 0:
			k := overrideKey{key, id[1:]}
			x.suffixes[k] = append(x.suffixes[k], int32(i))
			x.suffixLens = append(x.suffixLens, len(id)-1)
		default:
			x.other = append(x.other, int32(i))
		}
	}
	slices.Sort(x.prefixLens)
	x.prefixLens = slices.Compact(x.prefixLens)
	slices.Sort(x.suffixLens)
	x.suffixLens = slices.Compact(x.suffixLens)
	return x
}

// candidates appends to dst, in rank order, the ranks of the patterns on
// descriptor key that identifier id may meet: all n of them when x is nil.
// Each still has to be tried (Override.Applies: its expiry, and the
// whole pattern).
func (x *patternIndex) candidates(n int, key, id string, dst []int32) []int32 {
	if x == nil {
		return every(n, dst)
	}
	for _, l := range x.prefixLens {
		if l > len(id) {
			break
		}
		dst = append(dst, x.prefixes[overrideKey{key, id[:l]}]...)
	}
	for _, l := range x.suffixLens {
		if l > len(id) {
			break
		}
		dst = append(dst, x.suffixes[overrideKey{key, id[len(id)-l:]}]...)
	}
	dst = append(dst, x.other...)
	slices.Sort(dst)
	return dst
}
