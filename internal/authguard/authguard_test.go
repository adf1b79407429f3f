package authguard

import (
	"errors"
	"testing"
	"time"
)

// A guard of 6 a minute lets each name take 6 at once, then refuses it,
// saying to wait until one is back (10 s), and lets it again then; other
// names are apart, and Check counts nothing.
func TestGuardCountsEachNameApart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	g := New(6, func() time.Time { return now }, "calls")
	for i := range 6 {
		if err := g.Check("a"); err != nil {
			t.Fatalf("check %d: %v", i, err)
		}
		if err := g.Take("a"); err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
	}
	var r *RefusedError
	if err := g.Take("a"); !errors.As(err, &r) || r.Wait != 10*time.Second || r.Error() != "too many calls: try again in 10s" {
		t.Fatalf("the 7th: %v", err)
	}
	if err := g.Check("a"); err == nil {
		t.Fatal("check of a name with nothing left")
	}
	if err := g.Take("b"); err != nil {
		t.Fatalf("another name: %v", err)
	}
	g.Failed("b") // counted whatever is left
	now = now.Add(10 * time.Second)
	if err := g.Take("a"); err != nil {
		t.Fatalf("once a token is back: %v", err)
	}
	var none *Guard
	if New(0, nil, "x") != nil || none.Take("a") != nil || none.Check("a") != nil {
		t.Fatal("a guard of 0 a minute limits nothing")
	}
	none.Failed("a")
}
