package decide

import "slices"

// patternsFrom is the number of pattern overrides from which they are
// indexed: below it, trying each pattern costs less than looking it up.
const patternsFrom = 16

// patternIndex finds the pattern overrides (a '*' in the identifier) that
// an identifier may meet without trying every pattern: a tenant may hold
// up to policy.MaxOverrides of them, and trying ten thousand cost a
// quarter of a millisecond a decision. Patterns are looked up in an
// affixIndex by the literal prefix ("cust-42-*") or suffix
// ("*@example.com") they hold; those beginning and ending with a star
// are tried one by one. Entries are ranks in Compiled.patterns, whose
// order decides which override wins.
type patternIndex struct {
	affixes *affixIndex
	other   []int32 // patterns beginning and ending with a star
}

// newPatternIndex indexes patterns (Compiled.patterns, in their order), or
// returns nil for so few that they are tried one by one.
func newPatternIndex(patterns []*compiledOverride) *patternIndex {
	if len(patterns) < patternsFrom {
		return nil
	}
	x := &patternIndex{affixes: newAffixIndex()}
	for i, o := range patterns {
		if !x.affixes.add(o.IdentifierKey(), o.Identifier, int32(i)) {
			x.other = append(x.other, int32(i))
		}
	}
	x.affixes.done()
	return x
}

// candidates appends to dst, in rank order, the ranks of the patterns on
// descriptor key that identifier id may meet, with those of other keys
// among the patterns tried one by one: all n of them when x is nil. Each
// still has to be tried (its key, and Override.Applies: its expiry and
// the whole pattern).
func (x *patternIndex) candidates(n int, key, id string, dst []int32) []int32 {
	if x == nil {
		return every(n, dst)
	}
	dst = x.affixes.lookup(key, id, dst)
	dst = append(dst, x.other...)
	slices.Sort(dst)
	return dst
}
