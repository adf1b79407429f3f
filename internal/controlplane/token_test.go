package controlplane

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzReadToken: a page token is read back into the parts it was made of,
// and any other string is refused or read as parts PostgreSQL's text can
// hold (valid UTF-8, no NUL), so no token reaches the database as an
// error of its own.
func FuzzReadToken(f *testing.F) {
	for _, s := range []string{"", "%%%", "_w", pageToken("shop"), pageToken("client-001", "0e9c1a52-4c1e-4d4e-9b8e-2a1c3b4d5e6f"), pageToken("é", "")} {
		f.Add(s, 2)
	}
	f.Fuzz(func(t *testing.T, token string, n int) {
		n = 1 + abs(n)%3
		parts, err := readToken(token, n)
		if err != nil || parts == nil {
			if token == "" && err != nil {
				t.Fatalf("the first page refused: %v", err)
			}
			return
		}
		if len(parts) != n {
			t.Fatalf("%d parts of %q, want %d", len(parts), token, n)
		}
		for _, p := range parts {
			if !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
				t.Fatalf("part %q of %q", p, token)
			}
		}
		if again, err := readToken(pageToken(parts...), n); err != nil || !slices.Equal(again, parts) {
			t.Fatalf("%q: read %q, again %q (%v)", token, parts, again, err)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
