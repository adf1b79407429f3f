package limit

import (
	"math"

	"github.com/sluicehq/sluice/internal/policy"
)

// slack absorbs float64 rounding when comparing accumulated debts with a
// bound: a debt within one part in 10^12 of the bound is admitted. Without
// it, the k-th of k requests at one instant could be refused because k
// additions of an interval round differently from one multiplication.
const slack = 1 + 1e-12

// effectiveNow returns the time an evaluation happens at: the request's
// clock, unless the state has already seen a later time. Time never goes
// backwards for a limiter, so a clock that jumps back admits nothing extra;
// it only sees no time pass until it catches up.
func effectiveNow(last, now int64) int64 {
	if now < last {
		return last
	}
	if now < 0 {
		return 0
	}
	return now
}

// The meters: TokenBucket, GCRA and LeakyBucket are one algorithm (GCRA is
// the token bucket expressed in time; redis-cell's semantics) that differ in
// their bound and in how they report. State: T = last time seen (µs),
// X = debt (µs): how far the theoretical arrival time is ahead of T. A
// request of cost c adds c·interval of debt and is admitted when the debt
// stays within tau: burst·interval for the buckets, maxDelay+interval for the
// queue (the last unit of the request starts within maxDelay).

// debtAt returns the debt of s as seen at now (≥ s.T): the stored debt less
// the time elapsed since, or a negative number for idle time beyond it.
func debtAt(s *State, now int64) float64 {
	return s.X - float64(now-s.T)
}

func (l *Limiter) meter(s *State, a Args, r *Result) {
	now := effectiveNow(s.T, a.Now)
	debt := debtAt(s, now)
	if debt < 0 {
		debt = 0
	}
	bound := l.bound
	newDebt := debt + float64(a.Cost)*l.interval
	if newDebt > bound {
		*r = Result{Limit: l.shown, Remaining: floorNonNeg((bound - debt) * l.perUS),
			ResetAfter: micros(debt), RetryAfter: micros(newDebt - bound)}
		return
	}
	*s = State{T: now, X: newDebt}
	*r = Result{Allowed: true, Limit: l.shown, Remaining: floorNonNeg((bound - newDebt) * l.perUS),
		ResetAfter: micros(newDebt)}
	if l.alg == policy.LeakyBucket {
		r.Delay = micros(debt)
	}
}

// warmUp holds the derived constants of a token bucket that warms up, after
// Guava's SmoothWarmingUp: idle time accumulates "stored permits" up to
// maxPermits, and taking a stored permit above threshold costs more time
// than the stable interval, up to cold·stable at maxPermits. A cold bucket
// therefore admits at stable/coldFactor and reaches the stable rate after
// warming up.
type warmUp struct {
	stable, cold, threshold, maxPermits, slope, coolDown float64
}

func newWarmUp(stable, period, coldFactor float64) *warmUp {
	if coldFactor == 0 {
		coldFactor = 3
	}
	w := &warmUp{stable: stable, cold: stable * coldFactor}
	w.threshold = 0.5 * period / stable
	w.maxPermits = w.threshold + 2.0*period/(stable+w.cold)
	w.slope = (w.cold - stable) / (w.maxPermits - w.threshold)
	w.coolDown = period / w.maxPermits
	return w
}

// permitsToTime is the time one permit costs when p permits are stored above
// the threshold.
func (w *warmUp) permitsToTime(p float64) float64 {
	return w.stable + float64(p*w.slope)
}

// wait returns the time taking n permits costs when stored are stored: the
// area under the cost curve for the stored ones, stable for the rest.
func (w *warmUp) wait(stored, n float64) float64 {
	fromStored := math.Min(n, stored)
	fresh := n - fromStored
	micros := 0.0
	if above := stored - w.threshold; above > 0 {
		aboveTake := math.Min(above, fromStored)
		length := w.permitsToTime(above) + w.permitsToTime(above-aboveTake)
		micros = float64(aboveTake*length) / 2.0
		fromStored -= aboveTake
	}
	return micros + float64(w.stable*fromStored) + float64(w.stable*fresh)
}

// capacity returns the largest cost admitted from a cold (fresh) bucket:
// taking it must cost no more than tau. Any cost up to it is admissible
// after waiting, whatever the state.
func (w *warmUp) capacity(burst int64) int64 {
	tau := float64(burst) * w.stable * slack
	lo, hi := int64(0), burst // wait(max, lo) <= tau < wait(max, hi+1)
	for lo < hi {
		mid := hi - (hi-lo)/2
		if w.wait(w.maxPermits, float64(mid)) <= tau {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo // ≥ 1: validation requires burst ≥ coldFactor
}

// warmingBucket is the token bucket with warm-up. State: T = last time,
// X = debt (µs) as in meter, Y = maxPermits − stored permits, so the zero
// State is a cold, idle bucket.
func (l *Limiter) warmingBucket(s *State, a Args, r *Result) {
	w := l.warm
	now := effectiveNow(s.T, a.Now)
	debt := debtAt(s, now)
	stored := w.maxPermits - s.Y
	if debt < 0 { // idle beyond the debt: the idle time cools the bucket
		stored = stored + (-debt)/w.coolDown
		if stored*slack >= w.maxPermits { // rounding must not keep it warm forever
			stored = w.maxPermits
		}
		debt = 0
	}
	bound := l.bound
	cost := float64(a.Cost)
	newDebt := debt + w.wait(stored, cost)
	*r = Result{Limit: l.shown}
	ttl := debt
	if newDebt <= bound {
		r.Allowed = true
		ttl = newDebt
		stored -= math.Min(cost, stored)
		*s = State{T: now, X: newDebt, Y: w.maxPermits - stored}
	} else {
		r.RetryAfter = micros(newDebt - bound)
	}
	// The next permit is the most expensive one still stored; dividing by
	// its cost under-counts rather than over-counts what remains.
	next := w.stable
	if above := stored - w.threshold; above > 0 {
		next = w.permitsToTime(above)
	}
	r.Remaining = min(floorNonNeg((bound-ttl)/next), l.shown)
	r.ResetAfter = micros(ttl + float64((w.maxPermits-stored)*w.coolDown))
}
