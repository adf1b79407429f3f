package regions

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) int64 { return t0.Add(d).UnixMicro() }

// Counts merge as a grow-only counter: one count per decider run, the
// larger kept, runs of a region added up; a message read again or late
// changes nothing, and the decider's own region is not counted.
func TestTableMergesGrowOnly(t *testing.T) {
	t.Parallel()
	tb := newTable("east", []string{"east", "west"}, time.Second, AssumeLastRate, 0, t0)
	start, end := at(0), at(time.Minute)
	tb.merge("west", "w1", at(100*time.Millisecond), []count{{key: "k", start: start, end: end, n: 10}})
	tb.merge("west", "w2", at(100*time.Millisecond), []count{{key: "k", start: start, end: end, n: 5}})
	tb.merge("west", "w1", at(200*time.Millisecond), []count{{key: "k", start: start, end: end, n: 30}})
	tb.merge("west", "w1", at(100*time.Millisecond), []count{{key: "k", start: start, end: end, n: 10}}) // read again
	tb.merge("east", "e1", at(200*time.Millisecond), []count{{key: "k", start: start, end: end, n: 99}}) // its own region
	if got := tb.Spent("k", start, 0, 0, 100, t0.Add(300*time.Millisecond)); got != 35 {
		t.Fatalf("spent %d, want 30 + 5", got)
	}
	if got := tb.Spent("other", start, 0, 0, 100, t0.Add(300*time.Millisecond)); got != 0 {
		t.Fatalf("another key: spent %d", got)
	}
	// A sliding window weighs the window before.
	tb.merge("west", "w1", at(250*time.Millisecond), []count{{key: "k", start: end, end: at(2 * time.Minute), n: 4}})
	if got := tb.Spent("k", end, start, 0.5, 100, t0.Add(300*time.Millisecond)); got != 4+18 {
		t.Fatalf("sliding: spent %d, want 4 + 35/2 rounded up", got)
	}
}

// A region silent past the silence is taken at its last rate, or at a
// share of the limit.
func TestTableSilentRegions(t *testing.T) {
	t.Parallel()
	start, end := at(0), at(time.Hour)
	for _, tc := range []struct {
		assume Assumption
		share  float64
		want   int64 // spent 3 s after the last message
	}{
		{AssumeLastRate, 0, 40 + 3_000*0.2}, // 20 in 100 ms: 0.2 a ms
		{AssumeShare, 0.5, 50},
	} {
		tb := newTable("east", []string{"east", "west"}, time.Second, tc.assume, tc.share, t0)
		tb.merge("west", "w1", at(100*time.Millisecond), []count{{key: "k", start: start, end: end, n: 20}})
		tb.merge("west", "w1", at(200*time.Millisecond), []count{{key: "k", start: start, end: end, n: 40}})
		if got := tb.Spent("k", start, 0, 0, 100, t0.Add(900*time.Millisecond)); got != 40 {
			t.Fatalf("%v: heard 700 ms ago: spent %d, want 40", tc.assume, got)
		}
		if s := tb.Silent(t0.Add(900 * time.Millisecond)); len(s) != 0 {
			t.Fatalf("%v: silent %v within the silence", tc.assume, s)
		}
		now := t0.Add(3200 * time.Millisecond)
		if got := tb.Spent("k", start, 0, 0, 100, now); got != tc.want {
			t.Fatalf("%v: silent 3 s: spent %d, want %d", tc.assume, got, tc.want)
		}
		if s := tb.Silent(now); len(s) != 1 || s[0] != "west" {
			t.Fatalf("%v: silent %v, want west", tc.assume, s)
		}
	}
	// A region never heard from is silent from the start.
	tb := newTable("east", []string{"east", "west"}, time.Second, AssumeShare, 0.25, t0)
	if got := tb.Spent("k", start, 0, 0, 100, t0.Add(2*time.Second)); got != 25 {
		t.Fatalf("never heard: spent %d, want a quarter of 100", got)
	}
}

// The decider's own counts go out once each time they rise; counts of
// windows long over are forgotten on both sides.
func TestTableOwnCountsAndExpiry(t *testing.T) {
	t.Parallel()
	tb := newTable("east", []string{"east", "west"}, time.Second, AssumeLastRate, 0, t0)
	start, end := at(0), at(time.Second)
	tb.Admitted("k", start, end, 2)
	tb.Admitted("k", start, end, 3)
	if got := tb.takeOwn(at(0)); len(got) != 1 || got[0].n != 5 {
		t.Fatalf("took %+v, want k at 5", got)
	}
	if got := tb.takeOwn(at(0)); len(got) != 0 {
		t.Fatalf("took %+v again, unchanged", got)
	}
	tb.raise([]count{{key: "k", start: start, end: end, n: 5}}) // a failed write
	if got := tb.takeOwn(at(2 * time.Second)); len(got) != 1 || got[0].n != 5 {
		t.Fatalf("after a failed write took %+v, want k at 5 again", got)
	}
	if len(tb.own) != 0 {
		t.Fatalf("own counts of a window over are kept: %v", tb.own)
	}
	tb.merge("west", "w1", at(100*time.Millisecond), []count{{key: "k", start: start, end: end, n: 7}})
	tb.expire(at(1500 * time.Millisecond)) // a sliding window still reaches it
	if got := tb.Spent("k", end, start, 0.5, 100, t0.Add(1500*time.Millisecond)); got != 4 {
		t.Fatalf("spent %d, want 7/2 rounded up", got)
	}
	tb.expire(at(2100 * time.Millisecond))
	if len(tb.others) != 0 {
		t.Fatalf("counts of a window no sliding window reaches are kept: %v", tb.others)
	}
}
