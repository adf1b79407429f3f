package pgstore

import (
	"cmp"
	"strings"
)

// pageLimit is the size of a page asked for as n: 0 (or less) means 100,
// more than 1000 means 1000.
func pageLimit(n int) int { return min(cmp.Or(max(n, 0), 100), 1000) }

// likePrefix is the LIKE pattern of the strings that start with prefix,
// taken literally (its %, _ and \ included).
func likePrefix(prefix string) string {
	return strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(prefix) + "%"
}

// cutPage trims the up to limit+1 rows a page's query read (one more than
// the page, to learn whether more follow) to the page, and says whether
// more follow.
func cutPage[T any](rows []T, limit int) ([]T, bool) {
	if len(rows) <= limit {
		return rows, false
	}
	return rows[:limit], true
}

// allPages gathers every page that page lists, from the first (after the
// zero cursor) to the one that answers the zero cursor as the next.
func allPages[T any, C comparable](page func(after C) ([]T, C, error)) ([]T, error) {
	var all []T
	var after, none C
	for {
		items, next, err := page(after)
		all = append(all, items...)
		if err != nil || next == none {
			return all, err
		}
		after = next
	}
}
