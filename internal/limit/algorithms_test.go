package limit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// t0 is a fixed instant (µs) aligned to a minute, so window tests read simply.
const t0 = 1_700_000_040_000_000

const ms = int64(time.Millisecond / time.Microsecond)

// step is one request at t0+at and the answer expected for it. Fields left
// at their zero value are still checked: a step states the whole answer.
type step struct {
	at      int64 // µs after t0
	cost    int64
	lease   int64
	release bool // release lease instead of evaluating
	want    Result
}

func ok(remaining int64, reset time.Duration) Result {
	return Result{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func no(remaining int64, retry, reset time.Duration) Result {
	return Result{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func runSteps(t *testing.T, p policy.Params, limit int64, steps []step) {
	t.Helper()
	l := MustCompile(p)
	var s State
	for i, st := range steps {
		if st.release {
			s = l.Release(s, t0+st.at, st.lease, nil)
			continue
		}
		var got Result
		s, got = l.Eval(s, Args{Now: t0 + st.at, Cost: st.cost, Lease: st.lease}, nil)
		st.want.Limit = limit
		if got != st.want {
			t.Fatalf("step %d (t0%+dµs cost %d): got %+v, want %+v", i, st.at, st.cost, got, st.want)
		}
	}
}

func TestTokenBucket(t *testing.T) {
	t.Parallel()
	// 10 per second (one token per 100 ms), burst 5.
	p := policy.Params{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Second, Burst: 5}
	runSteps(t, p, 5, []step{
		{at: 0, cost: 1, want: ok(4, 100*time.Millisecond)},
		{at: 0, cost: 4, want: ok(0, 500*time.Millisecond)},
		{at: 0, cost: 1, want: no(0, 100*time.Millisecond, 500*time.Millisecond)},
		{at: 100 * ms, cost: 1, want: ok(0, 500*time.Millisecond)},
		{at: 350 * ms, cost: 1, want: ok(1, 350*time.Millisecond)},
		{at: 350 * ms, cost: 6, want: no(1, Never, 350*time.Millisecond)},  // above burst: never
		{at: 350 * ms, cost: -1, want: no(1, Never, 350*time.Millisecond)}, // negative: never, refunds nothing
		{at: 350 * ms, cost: 0, want: ok(1, 350*time.Millisecond)},         // a query consumes nothing
		{at: 200 * ms, cost: 1, want: ok(0, 450*time.Millisecond)},         // clock back: as at 350 ms
		{at: 10_000 * ms, cost: 0, want: ok(5, 0)},
	})
}

func TestGCRARedisCellExample(t *testing.T) {
	t.Parallel()
	// redis-cell's README: CL.THROTTLE user123 15 30 60 → max_burst 15
	// (limit 16), 30 per 60 s: "0 16 15 -1 2".
	p := policy.Params{Algorithm: policy.GCRA, Limit: 30, Window: time.Minute, Burst: 16}
	runSteps(t, p, 16, []step{
		{at: 0, cost: 1, want: ok(15, 2*time.Second)},
		{at: 0, cost: 15, want: ok(0, 32*time.Second)},
		{at: 0, cost: 1, want: no(0, 2*time.Second, 32*time.Second)},
		{at: 2000 * ms, cost: 1, want: ok(0, 32*time.Second)},
		{at: 3000 * ms, cost: 1, want: no(0, time.Second, 31*time.Second)},
		{at: 100_000 * ms, cost: 16, want: ok(0, 32*time.Second)},
		{at: 100_000 * ms, cost: 17, want: no(0, Never, 32*time.Second)},
	})
}

func TestLeakyBucketQueue(t *testing.T) {
	t.Parallel()
	// Drains 10 per second; waits up to 250 ms: queue of 3.
	p := policy.Params{Algorithm: policy.LeakyBucket, Limit: 10, Window: time.Second, MaxDelay: 250 * time.Millisecond}
	delayed := func(r Result, d time.Duration) Result { r.Delay = d; return r }
	runSteps(t, p, 3, []step{
		{at: 0, cost: 1, want: ok(2, 100*time.Millisecond)},
		{at: 0, cost: 1, want: delayed(ok(1, 200*time.Millisecond), 100*time.Millisecond)},
		{at: 0, cost: 1, want: delayed(ok(0, 300*time.Millisecond), 200*time.Millisecond)},
		{at: 0, cost: 1, want: no(0, 50*time.Millisecond, 300*time.Millisecond)},
		{at: 50 * ms, cost: 1, want: delayed(ok(0, 350*time.Millisecond), 250*time.Millisecond)},
		{at: 50 * ms, cost: 4, want: no(0, Never, 350*time.Millisecond)},
		{at: 1000 * ms, cost: 3, want: ok(0, 300*time.Millisecond)},
	})
}

func TestFixedWindow(t *testing.T) {
	t.Parallel()
	p := policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Second}
	runSteps(t, p, 3, []step{
		{at: 100 * ms, cost: 1, want: ok(2, 900*time.Millisecond)},
		{at: 200 * ms, cost: 2, want: ok(0, 800*time.Millisecond)},
		{at: 300 * ms, cost: 1, want: no(0, 700*time.Millisecond, 700*time.Millisecond)},
		{at: 1000 * ms, cost: 1, want: ok(2, time.Second)},
		{at: 500 * ms, cost: 1, want: ok(1, time.Second)}, // clock back: counted in the latest window
		{at: 1999 * ms, cost: 4, want: no(1, Never, time.Millisecond)},
		{at: 5000 * ms, cost: 0, want: ok(3, 0)},
	})
}

func TestCalendarWindows(t *testing.T) {
	t.Parallel()
	at := func(s string) int64 {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMicro()
	}
	for _, c := range []struct {
		cal        policy.Calendar
		t          string
		start, end string
	}{
		{policy.CalendarMonth, "2024-02-29T23:59:59.999999Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z"},
		{policy.CalendarMonth, "2024-03-01T00:00:00Z", "2024-03-01T00:00:00Z", "2024-04-01T00:00:00Z"},
		{policy.CalendarMonth, "2023-12-31T12:00:00Z", "2023-12-01T00:00:00Z", "2024-01-01T00:00:00Z"},
		{policy.CalendarMonth, "1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "1970-02-01T00:00:00Z"},
		{policy.CalendarYear, "2024-07-04T10:00:00Z", "2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{policy.CalendarYear, "2100-12-31T23:59:59Z", "2100-01-01T00:00:00Z", "2101-01-01T00:00:00Z"},
		{policy.CalendarWeek, "2026-11-22T23:59:59Z", "2026-11-16T00:00:00Z", "2026-11-23T00:00:00Z"}, // a Sunday
		{policy.CalendarWeek, "2026-11-23T00:00:00Z", "2026-11-23T00:00:00Z", "2026-11-30T00:00:00Z"}, // a Monday
		{policy.CalendarWeek, "1970-01-01T00:00:00Z", "1969-12-29T00:00:00Z", "1970-01-05T00:00:00Z"},
	} {
		if s, e := CalendarWindow(at(c.t), c.cal, time.UTC); s != at(c.start) || e != at(c.end) {
			t.Errorf("%s of %s: %s to %s, want %s to %s", c.cal, c.t, time.UnixMicro(s).UTC(), time.UnixMicro(e).UTC(), c.start, c.end)
		}
	}
	for range 20000 { // against the calendar as time.AddDate counts it
		ts := rand.Int64N(at("2200-01-01T00:00:00Z"))
		for cal := policy.CalendarWeek; cal <= policy.CalendarDay; cal++ {
			if s, e := CalendarWindow(ts, cal, time.UTC); [2]int64{s, e} != calendarRef(ts, cal) {
				t.Fatalf("%s of %s: %d to %d, want %v", cal, time.UnixMicro(ts).UTC(), s, e, calendarRef(ts, cal))
			}
		}
	}

	// 3 a month: the count starts afresh on the 1st, whatever the month's
	// length, and reset and retry run to it.
	p := policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Calendar: policy.CalendarMonth}
	l := MustCompile(p)
	var st State
	var r Result
	feb := at("2024-02-28T00:00:00Z")
	for i, s := range []struct {
		now    int64
		cost   int64
		allow  bool
		remain int64
	}{
		{feb, 2, true, 1},
		{feb + dayUS, 1, true, 0}, // Feb 29th
		{feb + dayUS, 1, false, 0},
		{at("2024-03-01T00:00:00Z"), 3, true, 0},
		{at("2024-03-31T23:59:59Z"), 1, false, 0},
	} {
		st, r = l.Eval(st, Args{Now: s.now, Cost: s.cost}, nil)
		_, end := CalendarWindow(s.now, p.Calendar, time.UTC)
		left := time.Duration(end-s.now) * time.Microsecond
		if r.Allowed != s.allow || r.Remaining != s.remain || r.ResetAfter != left || (!s.allow && r.RetryAfter != left) {
			t.Fatalf("step %d: %+v, want allowed %v, remaining %d, reset %v", i, r, s.allow, s.remain, left)
		}
	}
}

// TestCalendarWindowsInZones checks CalendarWindow in time zones whose
// offsets change, some at midnight, one skipping a whole day, against the
// definition: the window holding t runs from the first instant whose local
// date is in t's period (day, week, month, year) to the first instant of
// the next period.
func TestCalendarWindowsInZones(t *testing.T) {
	t.Parallel()
	zones := []string{"America/New_York", "Europe/Paris", "America/Santiago", "America/Havana", "Asia/Beirut",
		"America/Sao_Paulo", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Kathmandu", "Africa/Casablanca", "Pacific/Chatham"}
	day := func(noon time.Time) int { return int((noon.Unix()+86400*200_000)/86400) - 200_000 } // floored, before 1970 too
	period := func(us int64, c policy.Calendar, loc *time.Location) int {
		tm := time.UnixMicro(us).In(loc)
		y, m, d := tm.Date()
		switch c {
		case policy.CalendarWeek: // the week's Monday, as a day number
			noon := time.Date(y, m, d, 12, 0, 0, 0, time.UTC)
			return day(noon) - (int(noon.Weekday())+6)%7
		case policy.CalendarMonth:
			return y*12 + int(m)
		case policy.CalendarYear:
			return y
		}
		return day(time.Date(y, m, d, 12, 0, 0, 0, time.UTC))
	}
	// Around each zone's changes of offset, and at random.
	var times []int64
	for _, name := range zones {
		loc, err := policy.Location(name)
		if err != nil {
			t.Fatal(err)
		}
		for tm := time.Date(1970, 1, 1, 0, 0, 0, 0, loc); tm.Year() < 2040; {
			_, end := tm.ZoneBounds()
			if end.IsZero() {
				break
			}
			for _, d := range []time.Duration{-25 * time.Hour, -time.Hour, -time.Microsecond, 0, time.Microsecond, time.Hour, 25 * time.Hour} {
				times = append(times, end.Add(d).UnixMicro())
			}
			tm = end
		}
	}
	for range 2000 {
		times = append(times, rand.Int64N(4102444800_000000))
	}
	for _, name := range zones {
		loc, _ := policy.Location(name)
		for _, ts := range times {
			for cal := policy.CalendarWeek; cal <= policy.CalendarDay; cal++ {
				s, e := CalendarWindow(ts, cal, loc)
				p := period(ts, cal, loc)
				if !(s <= ts && ts < e) || period(s, cal, loc) != p || period(s-1, cal, loc) >= p ||
					period(e-1, cal, loc) != p || period(e, cal, loc) <= p {
					t.Fatalf("%s %s of %s: %s to %s", name, cal, time.UnixMicro(ts).In(loc), time.UnixMicro(s).In(loc), time.UnixMicro(e).In(loc))
				}
				edges := CalendarEdges(ts, cal, loc)
				if ps, pe := CalendarWindow(s-1, cal, loc); edges != [4]int64{ps, s, e, func() int64 { _, n := CalendarWindow(e, cal, loc); return n }()} || pe != s {
					t.Fatalf("%s %s of %s: edges %v", name, cal, time.UnixMicro(ts).In(loc), edges)
				}
			}
		}
	}

	// A daily quota in New York on the day clocks go forward: 23 hours,
	// from midnight EST (05:00 UTC) to midnight EDT (04:00 UTC).
	ny, _ := policy.Location("America/New_York")
	l := MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Calendar: policy.CalendarDay, TimeZone: "America/New_York"})
	noon := time.Date(2026, 3, 8, 12, 0, 0, 0, ny).UnixMicro()
	st, r := l.Eval(State{}, Args{Now: noon, Cost: 2}, nil)
	if want := 12 * time.Hour; !r.Allowed || r.ResetAfter != want {
		t.Fatalf("at noon: %+v, want allowed, reset in %v", r, want)
	}
	if _, r = l.Eval(st, Args{Now: time.Date(2026, 3, 8, 23, 59, 0, 0, ny).UnixMicro(), Cost: 1}, nil); r.Allowed || r.RetryAfter != time.Minute {
		t.Fatalf("at 23:59: %+v, want rejected until midnight", r)
	}
	if _, r = l.Eval(st, Args{Now: time.Date(2026, 3, 9, 0, 0, 0, 0, ny).UnixMicro(), Cost: 1}, nil); !r.Allowed {
		t.Fatalf("at midnight: %+v, want a fresh day", r)
	}
}

// dayUS is a day of 24 hours in µs.
const dayUS = 24 * 60 * 60 * 1_000_000

// calendarRef is the calendar window holding t, as time.AddDate counts
// it: the reference CalendarWindow is checked against.
func calendarRef(t int64, c policy.Calendar) [2]int64 {
	tm := time.UnixMicro(t).UTC()
	day := time.Date(tm.Year(), tm.Month(), tm.Day(), 0, 0, 0, 0, time.UTC)
	var start, end time.Time
	switch c {
	case policy.CalendarDay:
		start, end = day, day.AddDate(0, 0, 1)
	case policy.CalendarWeek:
		start = day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		end = start.AddDate(0, 0, 7)
	case policy.CalendarMonth:
		start = day.AddDate(0, 0, 1-day.Day())
		end = start.AddDate(0, 1, 0)
	case policy.CalendarYear:
		start = day.AddDate(0, 0, 1-day.YearDay())
		end = start.AddDate(1, 0, 0)
	}
	return [2]int64{start.UnixMicro(), end.UnixMicro()}
}

func TestSlidingWindow(t *testing.T) {
	t.Parallel()
	p := policy.Params{Algorithm: policy.SlidingWindow, Limit: 10, Window: time.Second}
	runSteps(t, p, 10, []step{
		{at: 500 * ms, cost: 5, want: ok(5, 1500*time.Millisecond)},
		// Next window, 250 ms in: estimate 5·0.75 = 3.75.
		{at: 1250 * ms, cost: 6, want: ok(0, 1750*time.Millisecond)},
		// 3.75+6+1 > 10: wait until 5·w+6 ≤ 9, w = 0.6, at 1400 ms.
		{at: 1250 * ms, cost: 1, want: no(0, 150*time.Millisecond, 1750*time.Millisecond)},
		{at: 1400 * ms, cost: 1, want: ok(0, 1600*time.Millisecond)},
		// cur 7 > 9-3: only in the next window, when 7·w ≤ 7, at once.
		{at: 1400 * ms, cost: 3, want: no(0, 600*time.Millisecond, 1600*time.Millisecond)},
		{at: 2000 * ms, cost: 3, want: ok(0, 2000*time.Millisecond)},
		{at: 2000 * ms, cost: 11, want: no(0, Never, 2000*time.Millisecond)},
		{at: 9000 * ms, cost: 0, want: ok(10, 0)},
	})
}

func TestSlidingBuckets(t *testing.T) {
	t.Parallel()
	// 4 per second in four 250 ms sub-buckets.
	p := policy.Params{Algorithm: policy.SlidingBuckets, Limit: 4, Window: time.Second, Granularity: 250 * time.Millisecond}
	runSteps(t, p, 4, []step{
		{at: 0, cost: 2, want: ok(2, time.Second)},
		{at: 300 * ms, cost: 2, want: ok(0, 950*time.Millisecond)},
		{at: 900 * ms, cost: 1, want: no(0, 100*time.Millisecond, 350*time.Millisecond)},
		{at: 1000 * ms, cost: 1, want: ok(1, time.Second)},
		{at: 1000 * ms, cost: 2, want: no(1, 250*time.Millisecond, time.Second)},
		{at: 3000 * ms, cost: 5, want: no(4, Never, 0)},
		{at: 3000 * ms, cost: 4, want: ok(0, time.Second)},
	})
}

func TestSlidingLog(t *testing.T) {
	t.Parallel()
	p := policy.Params{Algorithm: policy.SlidingLog, Limit: 3, Window: time.Second}
	runSteps(t, p, 3, []step{
		{at: 0, cost: 1, want: ok(2, time.Second)},
		{at: 200 * ms, cost: 1, want: ok(1, time.Second)},
		{at: 400 * ms, cost: 1, want: ok(0, time.Second)},
		{at: 900 * ms, cost: 1, want: no(0, 100*time.Millisecond, 500*time.Millisecond)},
		{at: 900 * ms, cost: 2, want: no(0, 300*time.Millisecond, 500*time.Millisecond)},
		{at: 1000 * ms, cost: 1, want: ok(0, time.Second)},
		{at: 100 * ms, cost: 1, want: no(0, 200*time.Millisecond, time.Second)}, // clock back: still at 1000 ms
		{at: 2400 * ms, cost: 3, want: ok(0, time.Second)},
	})
}

func TestConcurrency(t *testing.T) {
	t.Parallel()
	p := policy.Params{Algorithm: policy.Concurrency, Limit: 2, LeaseTTL: 10 * time.Second}
	runSteps(t, p, 2, []step{
		{at: 0, cost: 1, lease: 1, want: ok(1, 10*time.Second)},
		{at: 1000 * ms, cost: 1, lease: 2, want: ok(0, 10*time.Second)},
		{at: 2000 * ms, cost: 1, lease: 3, want: no(0, 8*time.Second, 9*time.Second)},
		{at: 2000 * ms, cost: 1, lease: 1, want: ok(0, 10*time.Second)}, // renewal is idempotent
		{at: 2000 * ms, lease: 2, release: true},
		{at: 2000 * ms, cost: 1, lease: 3, want: ok(0, 10*time.Second)},
		{at: 12_000 * ms, cost: 2, lease: 4, want: ok(0, 10*time.Second)}, // the others expired
		{at: 12_000 * ms, cost: 3, lease: 5, want: no(0, Never, 10*time.Second)},
	})
}

func TestTokenBucketWarmUp(t *testing.T) {
	t.Parallel()
	// Stable 10/s (100 ms), warm-up 1 s, cold factor 3, burst 3. Guava's
	// constants: threshold 5 permits, max 10, slope 40 ms per permit.
	p := policy.Params{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Second, Burst: 3, WarmUp: time.Second}
	l := MustCompile(p)
	if l.Capacity() != 1 {
		t.Fatalf("cold capacity %d, want 1 (two cold permits cost 520 ms > 300 ms)", l.Capacity())
	}
	runSteps(t, p, 3, []step{
		// The first cold permit costs (300+260)/2 = 280 ms of the 300 ms tolerance.
		// Fresh (cold) again after the debt and one permit's cool-down (100 ms).
		{at: 0, cost: 1, want: ok(0, 380*time.Millisecond)},
		// The next costs (260+220)/2 = 240 ms: 520 > 300, retry after 220 ms.
		{at: 0, cost: 1, want: no(0, 220*time.Millisecond, 380*time.Millisecond)},
		{at: 220 * ms, cost: 1, want: ok(0, 500*time.Millisecond)},
		{at: 220 * ms, cost: 2, want: no(0, Never, 500*time.Millisecond)},
	})

	// Warm, the same bucket admits its full burst at once; cold, it admits one.
	warm := func(now int64, s State) (State, int) {
		n := 0
		for {
			ns, r := l.Eval(s, Args{Now: now, Cost: 1}, nil)
			if !r.Allowed {
				return s, n
			}
			s, n = ns, n+1
		}
	}
	s, n := warm(t0, State{})
	if n != 1 {
		t.Fatalf("cold burst admitted %d, want 1", n)
	}
	// Keep it busy at the stable rate for a while: it warms up.
	for now := t0 + 300*ms; now < t0+5000*ms; now += 100 * ms {
		s, _ = l.Eval(s, Args{Now: now, Cost: 1}, nil)
	}
	if _, n = warm(t0+5300*ms, s); n != 3 {
		t.Fatalf("warm burst admitted %d, want 3", n)
	}
}

func TestVeryLongWindow(t *testing.T) {
	t.Parallel()
	for _, alg := range []policy.Algorithm{policy.TokenBucket, policy.GCRA, policy.FixedWindow, policy.SlidingWindow} {
		p := policy.Params{Algorithm: alg, Limit: policy.MaxLimit, Window: policy.MaxWindow}
		l := MustCompile(p)
		var s State
		now := int64(t0)
		s, r := l.Eval(s, Args{Now: now, Cost: policy.MaxLimit}, nil)
		if !r.Allowed || r.Remaining != 0 {
			t.Fatalf("%s: full limit at once: %+v", alg, r)
		}
		_, r = l.Eval(s, Args{Now: now + 1, Cost: 1}, nil)
		if r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > policy.MaxWindow {
			t.Fatalf("%s: over the limit: %+v", alg, r)
		}
		_, r = l.Eval(s, Args{Now: now + 2*policy.MaxWindow.Microseconds(), Cost: policy.MaxLimit}, nil)
		if !r.Allowed {
			t.Fatalf("%s: after two windows: %+v", alg, r)
		}
	}
}

func TestZeroStateIsFreshAtAnyTime(t *testing.T) {
	t.Parallel()
	// The zero State must be a full limiter even at the epoch, where a
	// "last update" of 0 is indistinguishable from now.
	for _, p := range allParams() {
		l := MustCompile(p)
		for _, now := range []int64{0, 1, t0} {
			_, r := l.Eval(State{}, Args{Now: now, Cost: 0, Lease: 1}, nil)
			full := r.Remaining == r.Limit
			if p.WarmUp > 0 { // cold: fewer remain than the burst
				full = r.Remaining > 0 && r.ResetAfter == 0
			}
			if !r.Allowed || !full {
				t.Errorf("%s at %d: %+v, want a full limiter", p.Algorithm, now, r)
			}
		}
	}
}

// allParams returns one valid parameter set per algorithm (and warm-up).
func allParams() []policy.Params {
	return []policy.Params{
		{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Second, Burst: 5},
		{Algorithm: policy.TokenBucket, Limit: 10, Window: time.Second, Burst: 6, WarmUp: 2 * time.Second},
		{Algorithm: policy.GCRA, Limit: 7, Window: time.Second},
		{Algorithm: policy.LeakyBucket, Limit: 5, Window: time.Second, MaxDelay: 700 * time.Millisecond},
		{Algorithm: policy.FixedWindow, Limit: 5, Window: time.Second},
		{Algorithm: policy.SlidingLog, Limit: 5, Window: time.Second},
		{Algorithm: policy.SlidingWindow, Limit: 5, Window: time.Second},
		{Algorithm: policy.SlidingBuckets, Limit: 5, Window: time.Second, Granularity: 100 * time.Millisecond},
		{Algorithm: policy.Concurrency, Limit: 5, LeaseTTL: time.Second},
		{Algorithm: policy.FixedWindow, Limit: 5, Calendar: policy.CalendarWeek},
		{Algorithm: policy.FixedWindow, Limit: 5, Calendar: policy.CalendarMonth},
		{Algorithm: policy.FixedWindow, Limit: 5, Calendar: policy.CalendarYear},
	}
}
