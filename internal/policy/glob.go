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
	// The bytes before the first star begin v, those after the last end
	// it (apart: they may not overlap), and each run between two stars
	// stands at its leftmost place in what is left, after the previous
	// one: leftmost leaves the most room for the runs after it, so it
	// finds a match whenever there is one. Each run costs a strings.Index:
	// linear, where backtracking over the bytes cost up to
	// len(pattern) × len(v).
	if !strings.HasPrefix(v, pattern[:i]) {
		return false
	}
	v, pattern = v[i:], pattern[i+1:]
	j := strings.LastIndexByte(pattern, '*')
	last := pattern[j+1:]
	if !strings.HasSuffix(v, last) {
		return false
	}
	v = v[:len(v)-len(last)]
	if j < 0 { // one star: a prefix and a suffix
		return true
	}
	for mid := pattern[:j]; mid != ""; {
		var run string
		run, mid, _ = strings.Cut(mid, "*")
		if run == "" {
			continue
		}
		at := strings.Index(v, run)
		if at < 0 {
			return false
		}
		v = v[at+len(run):]
	}
	return true
}

// GlobLiterals is how many bytes of pattern stand for themselves: a
// pattern's specificity, the larger the fewer values it matches.
func GlobLiterals(pattern string) int {
	return len(pattern) - strings.Count(pattern, "*")
}
