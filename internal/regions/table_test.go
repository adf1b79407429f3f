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

// A region silent past the silence is taken to admit, in each window, as
// much as in the last windows heard of it, or a share of the limit.
func TestTableSilentRegions(t *testing.T) {
	t.Parallel()
	w := func(i int) (start, end int64) {
		return at(time.Duration(i) * time.Second), at(time.Duration(i+1) * time.Second)
	}
	s0, e0 := w(0)
	s1, e1 := w(1)
	s3, _ := w(3)
	for _, tc := range []struct {
		assume      Assumption
		share       float64
		in1, inNext int64 // spent, silent, in window 1 and in window 3
	}{
		{AssumeLastRate, 0, 30, 30}, // window 0 took 30, window 1 so far 10
		{AssumeShare, 0.5, 50, 50},
	} {
		tb := newTable("east", []string{"east", "west"}, time.Second, tc.assume, tc.share, t0)
		tb.merge("west", "w1", at(900*time.Millisecond), []count{{key: "k", start: s0, end: e0, n: 30}})
		tb.merge("west", "w1", at(1200*time.Millisecond), []count{{key: "k", start: s1, end: e1, n: 10}})
		if got := tb.Spent("k", s1, 0, 0, 100, t0.Add(1500*time.Millisecond)); got != 10 {
			t.Fatalf("%v: heard 300 ms ago: spent %d, want 10", tc.assume, got)
		}
		if s := tb.Silent(t0.Add(1500 * time.Millisecond)); len(s) != 0 {
			t.Fatalf("%v: silent %v within the silence", tc.assume, s)
		}
		now := t0.Add(2500 * time.Millisecond)
		if got := tb.Spent("k", s1, 0, 0, 100, now); got != tc.in1 {
			t.Fatalf("%v: silent, window 1: spent %d, want %d", tc.assume, got, tc.in1)
		}
		if s := tb.Silent(now); len(s) != 1 || s[0] != "west" {
			t.Fatalf("%v: silent %v, want west", tc.assume, s)
		}
		tb.expire(at(3500 * time.Millisecond)) // a silent region's last counts stay
		if got := tb.Spent("k", s3, 0, 0, 100, t0.Add(3500*time.Millisecond)); got != tc.inNext {
			t.Fatalf("%v: silent, window 3: spent %d, want %d", tc.assume, got, tc.inNext)
		}
	}
	// A region never heard from is silent from the start.
	tb := newTable("east", []string{"east", "west"}, time.Second, AssumeShare, 0.25, t0)
	if got := tb.Spent("k", s0, 0, 0, 100, t0.Add(2*time.Second)); got != 25 {
		t.Fatalf("never heard: spent %d, want a quarter of 100", got)
	}
}

// The decider's own counts go out once each time they rise; counts of
// windows long over are forgotten on both sides.
func TestTableOwnCountsAndExpiry(t *testing.T) {
	t.Parallel()
	tb := newTable("east", []string{"east", "west"}, 10*time.Second, AssumeLastRate, 0, t0) // no silence here
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

// A meter's counts go out with its µs per unit; another region's rise on
// a meter is handed to be charged once, and again only after a failure.
func TestTableMeters(t *testing.T) {
	t.Parallel()
	tb := newTable("east", []string{"east", "west"}, 10*time.Second, AssumeLastRate, 0, t0)
	tb.AdmittedMeter("k", 6000, 2, at(0))
	tb.AdmittedMeter("k", 6000, 1, at(time.Millisecond))
	if got := tb.takeOwn(at(0)); len(got) != 1 || got[0].n != 3 || got[0].interval != 6000 || got[0].start != at(0) {
		t.Fatalf("own meter counts %+v, want k at 3 of 6000 µs a unit since 0", got)
	}
	tb.merge("west", "w1", at(100*time.Millisecond), []count{{key: "m", start: 5, n: 3, interval: 6000}})
	tb.merge("west", "w1", at(200*time.Millisecond), []count{{key: "m", start: 5, n: 7, interval: 6000}})
	tb.merge("west", "w1", at(150*time.Millisecond), []count{{key: "m", start: 5, n: 3, interval: 6000}}) // late
	got := tb.takeCharges(at(300 * time.Millisecond))
	if len(got) != 1 || got[0] != (Charge{Key: "m", Run: "w1@5", Count: 7, Interval: 6000}) {
		t.Fatalf("charges %+v, want m of w1 at 7", got)
	}
	if again := tb.takeCharges(at(300 * time.Millisecond)); len(again) != 0 {
		t.Fatalf("charged again: %+v", again)
	}
	tb.owe(got)
	if retry := tb.takeCharges(at(300 * time.Millisecond)); len(retry) != 1 || retry[0].Count != 7 {
		t.Fatalf("after a failed charge: %+v, want m at 7 again", retry)
	}
	if s := tb.Spent("m", 5, 0, 0, 100, t0.Add(300*time.Millisecond)); s != 0 {
		t.Fatalf("a meter's counts are spent as a window's: %d", s)
	}
}

// A silent region's meters are charged as it last went on, or at the
// assumed share of the meter's rate; when it is heard again its real
// counts are charged once they pass what was assumed, never less.
func TestTableChargesASilentRegionsMeters(t *testing.T) {
	t.Parallel()
	const silence = time.Second
	for _, tc := range []struct {
		name   string
		assume Assumption
		share  float64
		rise   int64 // a 100 ms
		want   int64 // charged 2 s into the silence, 3 s after last heard
	}{
		{"last rate", AssumeLastRate, 0, 10, 650 + 3*100},
		{"share", AssumeShare, 0.5, 1, 65 + 3*1_000_000/6000/2}, // 6000 µs a unit, half of it: more than its rate
		{"share below the rate", AssumeShare, 0.5, 10, 650 + 3*100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable("east", []string{"east", "west"}, silence, tc.assume, tc.share, t0)
			// A burst, then rising at 100 ms steps for a second and more:
			// the rate is the last second's, not the burst's.
			tb.merge("west", "w1", at(-100*time.Millisecond), []count{{key: "m", start: 5, n: 0, interval: 6000}})
			tb.merge("west", "w1", at(0), []count{{key: "m", start: 5, n: 50 * tc.rise, interval: 6000}})
			for i := range 16 {
				tb.merge("west", "w1", at(time.Duration(i)*100*time.Millisecond), []count{{key: "m", start: 5, n: tc.rise * (50 + int64(i)), interval: 6000}})
			}
			n := tc.rise * 65
			if got := tb.takeCharges(at(1500 * time.Millisecond)); len(got) != 1 || got[0].Count != n {
				t.Fatalf("heard: charges %+v, want m at %d", got, n)
			}
			if got := tb.takeCharges(at(2400 * time.Millisecond)); len(got) != 0 {
				t.Fatalf("not yet silent: charges %+v", got)
			}
			got := tb.takeCharges(at(4500 * time.Millisecond))
			if len(got) != 1 || got[0].Count < tc.want*99/100 || got[0].Count > tc.want*101/100 {
				t.Fatalf("silent: charges %+v, want m at about %d", got, tc.want)
			}
			assumed := got[0].Count
			// Heard again, below what was assumed: nothing more, nothing back.
			tb.merge("west", "w1", at(4600*time.Millisecond), []count{{key: "m", start: 5, n: n + 1, interval: 6000}})
			if got := tb.takeCharges(at(4600 * time.Millisecond)); len(got) != 0 {
				t.Fatalf("heard again below the assumption: charges %+v", got)
			}
			tb.merge("west", "w1", at(4700*time.Millisecond), []count{{key: "m", start: 5, n: assumed + 5, interval: 6000}})
			if got := tb.takeCharges(at(4700 * time.Millisecond)); len(got) != 1 || got[0].Count != assumed+5 {
				t.Fatalf("heard again past the assumption: charges %+v, want m at %d", got, assumed+5)
			}
		})
	}
}
