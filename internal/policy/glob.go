package policy

import "strings"

// Glob reports whether v matches pattern, in which each '*' stands for any
// run of bytes, none included, and every other byte for itself: "user_*"
// is every value starting with "user_", "*@example.com" every value ending
// with "@example.com", "*.example.*" every value holding ".example." with
// anything before and after, "*" every value. A pattern without '*' is the
// value itself; with one at its end (the common case, envoyproxy/ratelimit's
// wildcards), a prefix: both decided without a scan.
func Glob(pattern, v string) bool {
	i := strings.IndexByte(pattern, '*')
	switch {
	case i < 0:
		return pattern == v
	case i == len(pattern)-1:
		return strings.HasPrefix(v, pattern[:i])
	}
	// Match the stars greedily, backtracking to the last one when a
	// literal byte fails: O(len(pattern) × len(v)) at worst, and values
	// are at most MaxDescriptorVal bytes.
	p, x := 0, 0
	star, retry := -1, 0
	for x < len(v) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, retry = p, x
			p++
		case p < len(pattern) && pattern[p] == v[x]:
			p, x = p+1, x+1
		case star >= 0:
			retry++
			p, x = star+1, retry
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// GlobLiterals is how many bytes of pattern stand for themselves: a
// pattern's specificity, the larger the fewer values it matches.
func GlobLiterals(pattern string) int {
	return len(pattern) - strings.Count(pattern, "*")
}
