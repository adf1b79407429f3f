package limit

import (
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// Window algorithms align windows on the Unix epoch, so that every decider
// and Redis agree on where a window starts. State: T = last time seen (µs);
// the window T falls in follows from it.

// windowStart returns the start of the window of width w holding t (t ≥ 0).
func windowStart(t, w int64) int64 { return t - t%w }

// CalendarWindow returns the start and the end (µs since the Unix epoch)
// of the calendar window c holding t (µs) in the time zone loc: from
// the first instant of the window's first day there to the first instant
// of the next window's. A day that a change of offset shortens or
// lengthens is as long as it is (23 or 25 hours); a day that starts in a
// skipped hour (clocks going from 23:59 to 01:00) starts at the change.
// The Lua scripts are given a calendar window's edges from here (see
// CalendarEdges), but for the flat script's weeks, months and years in
// UTC, computed from day counts (window1.lua).
func CalendarWindow(t int64, c policy.Calendar, loc *time.Location) (start, end int64) {
	y, m, d := time.UnixMicro(t).In(loc).Date()
	switch c {
	case policy.CalendarWeek:
		d -= (int(time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday()) + 6) % 7 // back to Monday
		return firstInstant(y, m, d, loc), firstInstant(y, m, d+7, loc)
	case policy.CalendarMonth:
		return firstInstant(y, m, 1, loc), firstInstant(y, m+1, 1, loc)
	case policy.CalendarYear:
		return firstInstant(y, time.January, 1, loc), firstInstant(y+1, time.January, 1, loc)
	}
	return firstInstant(y, m, d, loc), firstInstant(y, m, d+1, loc)
}

// CalendarEdges returns four edges of c's windows in loc around t (µs):
// the start of the window before t's, the start and the end of t's, and
// the end of the one after. A script given them picks the window that
// holds its own clock's time, which may be a window on either side of
// the decider's.
func CalendarEdges(t int64, c policy.Calendar, loc *time.Location) [4]int64 {
	s, e := CalendarWindow(t, c, loc)
	p, _ := CalendarWindow(s-1, c, loc)
	_, n := CalendarWindow(e, c, loc)
	return [4]int64{p, s, e, n}
}

// firstInstant returns the first instant (µs) whose date in loc is the
// day y-m-d (normalised as time.Date does). time.Date alone is not enough:
// where midnight falls in a skipped hour it answers an instant of the day
// before, or after, and where clocks go back over midnight, the second
// midnight.
func firstInstant(y int, m time.Month, d int, loc *time.Location) int64 {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	utc := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	want := dayNumber(utc.Date())
	switch got := dayNumber(t.Date()); {
	case got < want: // in the zone before a change that skips midnight
		_, next := t.ZoneBounds()
		return next.UnixMicro()
	case got > want: // the day was skipped whole, or begins in the gap
		prev, _ := t.ZoneBounds()
		return prev.UnixMicro()
	}
	if start, _ := t.ZoneBounds(); !start.IsZero() {
		// The same midnight in the zone before t's, if that zone reached it.
		_, off := start.Add(-time.Nanosecond).Zone()
		if u := utc.Add(-time.Duration(off) * time.Second); u.Before(start) && dayNumber(u.In(loc).Date()) == want {
			return u.UnixMicro()
		}
	}
	return t.UnixMicro()
}

// dayNumber orders dates.
func dayNumber(y int, m time.Month, d int) int { return (y*13+int(m))*32 + d }

// Windows returns, for a fixed or a sliding window, the window holding now
// (µs): its start and end and, for a sliding window, the start of the
// window before it and the weight the sliding window gives that one; ok is
// false for the other algorithms. A global rule's counts are replicated
// per window (package regions).
func (l *Limiter) Windows(now int64) (start, end, prev int64, weight float64, ok bool) {
	switch {
	case l.alg == policy.FixedWindow && l.calendar != policy.CalendarNone:
		start, end = CalendarWindow(now, l.calendar, l.zone)
		return start, end, 0, 0, true
	case l.alg == policy.FixedWindow:
		start = windowStart(now, l.window)
		return start, start + l.window, 0, 0, true
	case l.alg == policy.SlidingWindow:
		start = windowStart(now, l.window)
		return start, start + l.window, start - l.window, float64(l.window-(now-start)) / float64(l.window), true
	}
	return 0, 0, 0, 0, false
}

// Meter returns, for a token bucket or GCRA without warm-up (a meter: its
// state is a debt that drains with time), its µs per unit; ok is false for
// the other algorithms. A global rule's meter is charged with the other
// regions' admissions (package regions).
func (l *Limiter) Meter() (interval float64, ok bool) {
	if (l.alg == policy.TokenBucket || l.alg == policy.GCRA) && !l.Constants().Warm {
		return l.interval, true
	}
	return 0, false
}

// fixedWindow: X = units admitted in the window holding T.
func (l *Limiter) fixedWindow(s *State, a Args, r *Result) {
	now := effectiveNow(s.T, a.Now)
	var ws, we int64
	if l.calendar == policy.CalendarNone {
		ws = windowStart(now, l.window)
		we = ws + l.window
	} else {
		ws, we = CalendarWindow(now, l.calendar, l.zone)
	}
	var count float64
	if s.T >= ws {
		count = s.X
	}
	*r = Result{Limit: l.shown}
	end := time.Duration(we-now) * time.Microsecond
	limit := l.limit - a.Spent
	if count+float64(a.Cost) <= float64(limit) {
		r.Allowed = true
		count += float64(a.Cost)
		*s = State{T: now, X: count}
	} else {
		r.RetryAfter = end
	}
	r.Remaining = max(limit-int64(count), 0)
	if count > 0 {
		r.ResetAfter = end
	}
}

// slidingWindow estimates the count in the sliding window as the current
// fixed window's count plus the previous one's weighted by the share of it
// the sliding window still covers. X = count of the window holding T,
// Y = count of the window before it.
func (l *Limiter) slidingWindow(s *State, a Args, r *Result) {
	now := effectiveNow(s.T, a.Now)
	w := l.window
	ws := windowStart(now, w)
	var cur, prev float64
	switch windowStart(s.T, w) {
	case ws:
		cur, prev = s.X, s.Y
	case ws - w:
		prev = s.X
	}
	fw := float64(w)
	weight := float64(w-(now-ws)) / fw
	est := float64(prev*weight) + cur
	cost := float64(a.Cost)
	limit := float64(l.limit - a.Spent)
	*r = Result{Limit: l.shown}
	if est+cost <= limit*slack {
		r.Allowed = true
		cur += cost
		est += cost
		*s = State{T: now, X: cur, Y: prev}
	} else {
		// Wait until the estimate has dropped to limit-cost: within this
		// window as prev's weight shrinks, or else in the next one, where
		// cur becomes the weighted previous window.
		need := limit - cost
		var at float64 // µs after ws
		if need < 0 || cur == 0 && prev == 0 {
			at = 2 * fw // other regions' counts: until both windows have passed
		} else if cur <= need {
			at = fw - float64((need-cur)*fw)/prev
		} else {
			at = fw + max(fw-float64(need*fw)/cur, 0)
		}
		r.RetryAfter = micros(float64(ws-now) + at)
	}
	r.Remaining = floorNonNeg(limit*slack - est)
	switch {
	case cur > 0:
		r.ResetAfter = time.Duration(ws+2*w-now) * time.Microsecond
	case prev > 0:
		r.ResetAfter = time.Duration(ws+w-now) * time.Microsecond
	}
}

// slidingBuckets divides the window into l.buckets sub-buckets of l.gran µs
// and counts the last l.buckets of them, the current one included. Ext is a
// ring of counts indexed by sub-bucket number modulo l.buckets; the newest
// sub-bucket is the one holding T.
func (l *Limiter) slidingBuckets(s *State, a Args, buf []int64, r *Result) {
	now := effectiveNow(s.T, a.Now)
	n := int64(l.buckets)
	b, last := now/l.gran, s.T/l.gran
	ring := buf[:0]
	if len(s.Ext) == l.buckets && b-last < n {
		ring = append(ring, s.Ext...)
		for j := last + 1; j <= b; j++ {
			ring[j%n] = 0
		}
	} else {
		ring = append(ring, make([]int64, l.buckets)...)
	}
	var sum int64
	for _, c := range ring {
		sum += c
	}
	*r = Result{Limit: l.shown}
	if sum+a.Cost <= l.limit {
		r.Allowed = true
		ring[b%n] += a.Cost
		sum += a.Cost
		*s = State{T: now, Ext: ring}
	} else {
		// Sub-bucket j leaves the window at (j+n)·gran.
		freed := int64(0)
		for j := max(b-n+1, 0); j <= b; j++ {
			freed += ring[j%n]
			if sum-freed+a.Cost <= l.limit {
				r.RetryAfter = time.Duration((j+n)*l.gran-now) * time.Microsecond
				break
			}
		}
	}
	r.Remaining = l.limit - sum
	for j := b; j > b-n && j >= 0; j-- {
		if ring[j%n] > 0 {
			r.ResetAfter = time.Duration((j+n)*l.gran-now) * time.Microsecond
			break
		}
	}
}

// slidingLog counts exactly the units admitted in (now−window, now]. Ext
// holds (time, cost) pairs in time order; pairs that left the window are
// dropped on the next admission.
func (l *Limiter) slidingLog(s *State, a Args, buf []int64, r *Result) {
	now := effectiveNow(s.T, a.Now)
	log := s.Ext
	for len(log) >= 2 && log[0] <= now-l.window {
		log = log[2:]
	}
	var sum int64
	for i := 1; i < len(log); i += 2 {
		sum += log[i]
	}
	*r = Result{Limit: l.shown}
	if sum+a.Cost <= l.limit {
		r.Allowed = true
		sum += a.Cost
		out := append(buf[:0], log...)
		if n := len(out); n >= 2 && out[n-2] == now {
			out[n-1] += a.Cost
		} else {
			out = append(out, now, a.Cost)
		}
		log = out
		*s = State{T: now, Ext: out}
	} else {
		freed := int64(0)
		for i := 0; i < len(log); i += 2 {
			freed += log[i+1]
			if sum-freed+a.Cost <= l.limit {
				r.RetryAfter = time.Duration(log[i]+l.window-now) * time.Microsecond
				break
			}
		}
	}
	r.Remaining = l.limit - sum
	if n := len(log); n >= 2 {
		r.ResetAfter = time.Duration(log[n-2]+l.window-now) * time.Microsecond
	}
}
