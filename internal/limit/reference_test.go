package limit

import (
	"encoding/binary"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// The property tests feed random request sequences to every algorithm and
// check each answer against a brute-force reference built from the history
// of admitted requests, plus algorithm-independent properties: nothing is
// admitted beyond the bound, RetryAfter is honest, ResetAfter ends in a
// fresh state.

// event is one request of a sequence.
type event struct {
	dt      int64 // µs since the previous event; negative = clock went back
	cost    int64
	lease   int64
	release bool
}

// admitted is one admitted request in the reference history.
type admitted struct{ t, cost, lease, exp int64 }

// reference answers whether the next request is admitted, from history.
type reference interface {
	allow(now, cost, lease int64) bool
	commit(now, cost, lease int64)
	release(now, lease int64)
}

// decode turns fuzz bytes into parameters and a request sequence.
func decode(data []byte) (policy.Params, []event) {
	rd := func(n int) uint64 {
		var b [8]byte
		copy(b[:], data[:min(n, len(data))])
		data = data[min(n, len(data)):]
		return binary.LittleEndian.Uint64(b[:])
	}
	algs := allParams()
	p := algs[rd(1)%uint64(len(algs))]
	p.Limit = int64(rd(1)%20) + 1
	if p.Algorithm == policy.TokenBucket || p.Algorithm == policy.GCRA {
		p.Burst = int64(rd(1) % 20)
		if p.WarmUp > 0 {
			p.Burst = max(p.Burst, 3)
		}
	}
	if p.Algorithm != policy.Concurrency && p.Calendar == policy.CalendarNone {
		p.Window = time.Duration(rd(2)%5000+1) * time.Millisecond
	}
	if p.Algorithm == policy.SlidingBuckets {
		n := rd(1)%10 + 2
		p.Window = p.Window.Truncate(time.Millisecond*time.Duration(n)) + time.Millisecond*time.Duration(n)
		p.Granularity = p.Window / time.Duration(n)
	}
	if p.Algorithm == policy.LeakyBucket {
		p.MaxDelay = time.Duration(rd(2)%3000) * time.Millisecond
	}
	var evs []event
	for len(data) > 0 && len(evs) < 300 {
		b := rd(3)
		ev := event{dt: int64(b&0xffff) * 97, cost: int64(b>>16) % 4, lease: int64(b>>18) % 4}
		switch b >> 20 & 15 {
		case 0:
			ev.dt = -ev.dt // the clock goes back
		case 1:
			ev.cost = int64(b>>18)%25 - 2 // large or negative cost
		case 2:
			ev.release = true
		}
		// Calendar windows: steps of up to 35 hours (weeks), 7 days
		// (months) or 73 days (years), so that sequences cross windows.
		ev.dt *= [...]int64{1, 20_000, 100_000, 1_000_000}[p.Calendar]
		evs = append(evs, ev)
	}
	return p, evs
}

func newReference(p policy.Params) reference {
	switch p.Algorithm {
	case policy.TokenBucket, policy.GCRA, policy.LeakyBucket:
		if p.WarmUp > 0 {
			return nil // checked by its bound and the honesty properties
		}
		return newRatMeter(p)
	case policy.FixedWindow, policy.SlidingLog, policy.SlidingBuckets, policy.SlidingWindow:
		return &windowRef{p: p}
	case policy.Concurrency:
		return &leaseRef{p: p}
	}
	return nil
}

// ratMeter is GCRA in exact rational arithmetic: debt is the theoretical
// arrival time less the latest time seen.
type ratMeter struct {
	interval, tau, tat *big.Rat
	last               int64
}

func newRatMeter(p policy.Params) *ratMeter {
	w := p.Window.Microseconds()
	m := &ratMeter{interval: big.NewRat(w, p.Limit), tat: new(big.Rat)}
	if p.Algorithm == policy.LeakyBucket {
		m.tau = new(big.Rat).Add(big.NewRat(p.MaxDelay.Microseconds(), 1), m.interval)
	} else {
		m.tau = new(big.Rat).Mul(big.NewRat(p.Capacity(), 1), m.interval)
	}
	return m
}

func (m *ratMeter) newTat(now, cost int64) *big.Rat {
	now = max(now, m.last)
	tat := new(big.Rat).Set(m.tat)
	if n := big.NewRat(now, 1); tat.Cmp(n) < 0 {
		tat = n
	}
	return tat.Add(tat, new(big.Rat).Mul(big.NewRat(cost, 1), m.interval))
}

func (m *ratMeter) allow(now, cost, _ int64) bool {
	bound := new(big.Rat).Add(big.NewRat(max(now, m.last), 1), m.tau)
	return m.newTat(now, cost).Cmp(bound) <= 0
}

func (m *ratMeter) commit(now, cost, _ int64) {
	m.tat, m.last = m.newTat(now, cost), max(now, m.last)
}

func (m *ratMeter) release(int64, int64) {}

// windowRef recounts the admitted history for the window algorithms.
type windowRef struct {
	p    policy.Params
	hist []admitted
	last int64
}

func (w *windowRef) sum(from, to int64) (n int64) { // admitted in [from, to)
	for _, a := range w.hist {
		if a.t >= from && a.t < to {
			n += a.cost
		}
	}
	return n
}

func (w *windowRef) allow(now, cost, _ int64) bool {
	now = max(now, w.last)
	win := w.p.Window.Microseconds()
	limit := w.p.Limit
	switch w.p.Algorithm {
	case policy.FixedWindow:
		if w.p.Calendar != policy.CalendarNone {
			cw := calendarRef(now, w.p.Calendar)
			return w.sum(cw[0], cw[1])+cost <= limit
		}
		ws := now - now%win
		return w.sum(ws, ws+win)+cost <= limit
	case policy.SlidingLog:
		return w.sum(now-win+1, now+1)+cost <= limit
	case policy.SlidingBuckets:
		g := w.p.Granularity.Microseconds()
		b, n := now/g, win/g
		return w.sum((b-n+1)*g, (b+1)*g)+cost <= limit
	default: // SlidingWindow, with the same float64 formula as the engine
		ws := now - now%win
		cur, prev := float64(w.sum(ws, ws+win)), float64(w.sum(ws-win, ws))
		est := float64(prev*(float64(win-(now-ws))/float64(win))) + cur
		return est+float64(cost) <= float64(limit)*slack
	}
}

func (w *windowRef) commit(now, cost, lease int64) {
	w.last = max(now, w.last)
	w.hist = append(w.hist, admitted{t: w.last, cost: cost})
}

func (w *windowRef) release(int64, int64) {}

// leaseRef tracks leases by id.
type leaseRef struct {
	p      policy.Params
	leases []admitted
	last   int64
}

func (r *leaseRef) live(now int64) (inflight int64, held bool) {
	for _, l := range r.leases {
		if l.exp > now {
			inflight += l.cost
		}
	}
	return inflight, false
}

func (r *leaseRef) holds(now, lease int64) bool {
	for _, l := range r.leases {
		if l.lease == lease && l.exp > now {
			return true
		}
	}
	return false
}

func (r *leaseRef) allow(now, cost, lease int64) bool {
	now = max(now, r.last)
	inflight, _ := r.live(now)
	return r.holds(now, lease) || inflight+cost <= r.p.Limit
}

func (r *leaseRef) commit(now, cost, lease int64) {
	r.last = max(now, r.last)
	for i := range r.leases {
		if r.leases[i].lease == lease && r.leases[i].exp > r.last {
			r.leases[i].exp = r.last + r.p.LeaseTTL.Microseconds()
			return
		}
	}
	r.release(now, lease)
	r.leases = append(r.leases, admitted{t: r.last, cost: cost, lease: lease, exp: r.last + r.p.LeaseTTL.Microseconds()})
}

func (r *leaseRef) release(now, lease int64) {
	r.last = max(now, r.last)
	kept := r.leases[:0]
	for _, l := range r.leases {
		if l.lease != lease && l.exp > r.last {
			kept = append(kept, l)
		}
	}
	r.leases = kept
}

// checkSequence runs evs through the algorithm and the reference and checks
// every property; it reports the first failure.
func checkSequence(t *testing.T, p policy.Params, evs []event) {
	t.Helper()
	l, err := Compile(p)
	if err != nil {
		t.Fatalf("params %+v: %v", p, err)
	}
	ref := newReference(p)
	var s State
	var hist []admitted
	now := int64(t0)
	for i, ev := range evs {
		now += ev.dt
		if ev.release {
			if p.Algorithm == policy.Concurrency {
				s = l.Release(s, now, ev.lease, nil)
				ref.release(now, ev.lease)
			}
			continue
		}
		ns, r := l.Eval(s, Args{Now: now, Cost: ev.cost, Lease: ev.lease}, nil)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%s %+v, event %d (now t0%+d, cost %d, lease %d) → %+v: "+format,
				append([]any{p.Algorithm, p, i, now - t0, ev.cost, ev.lease, r}, args...)...)
		}
		if ev.cost < 0 || ev.cost > l.Capacity() {
			if r.Allowed || r.RetryAfter != Never {
				fail("an invalid cost must be refused for good")
			}
		} else if ref != nil {
			if want := ref.allow(now, ev.cost, ev.lease); r.Allowed != want {
				fail("reference says allowed=%v", want)
			}
		}
		if r.Remaining < 0 || r.Remaining > r.Limit {
			fail("remaining out of [0, limit]")
		}
		if r.Allowed && ev.cost > 0 {
			if ref != nil {
				ref.commit(now, ev.cost, ev.lease)
			}
			hist = append(hist, admitted{t: max(now, s.T), cost: ev.cost})
			checkHonestReset(t, l, ns, now, fail)
			s = ns
			continue
		}
		if !r.Allowed && r.RetryAfter != Never {
			checkHonestRetry(t, l, s, now, ev, r, fail)
		}
	}
	checkBound(t, l, p, hist)
}

// checkHonestRetry: the same request on the same state is admitted after
// RetryAfter, and, for exact algorithms, not a microsecond earlier.
func checkHonestRetry(t *testing.T, l *Limiter, s State, now int64, ev event, r Result, fail func(string, ...any)) {
	t.Helper()
	if r.RetryAfter <= 0 {
		fail("a rejection must ask to wait")
	}
	at := max(now, s.T) + r.RetryAfter.Microseconds()
	if _, r2 := l.Eval(s, Args{Now: at, Cost: ev.cost, Lease: ev.lease}, nil); !r2.Allowed {
		fail("not admitted after RetryAfter: %+v", r2)
	}
	exact := l.warm == nil && l.alg != policy.SlidingWindow && l.alg != policy.Concurrency
	if _, r2 := l.Eval(s, Args{Now: at - 1, Cost: ev.cost, Lease: ev.lease}, nil); exact && r2.Allowed {
		fail("admitted 1µs before RetryAfter: RetryAfter is too long")
	}
}

// checkHonestReset: after ResetAfter the state answers like a fresh one,
// which is what lets stores expire it then.
func checkHonestReset(t *testing.T, l *Limiter, s State, now int64, fail func(string, ...any)) {
	t.Helper()
	_, r := l.Eval(s, Args{Now: max(now, s.T), Lease: -1}, nil)
	at := max(now, s.T) + r.ResetAfter.Microseconds()
	_, got := l.Eval(s, Args{Now: at, Lease: -1}, nil)
	_, fresh := l.Eval(State{}, Args{Now: at, Lease: -1}, nil)
	if got.Remaining != fresh.Remaining || got.ResetAfter != fresh.ResetAfter {
		fail("after ResetAfter %v: %+v, a fresh limiter says %+v", r.ResetAfter, got, fresh)
	}
}

// checkBound: the meters never admit more than burst + rate × elapsed in any
// interval; the windows never more than limit per window (fixed, buckets,
// log: per sliding window of their resolution).
func checkBound(t *testing.T, l *Limiter, p policy.Params, hist []admitted) {
	t.Helper()
	for i := range hist {
		var n int64
		for j := i; j < len(hist); j++ {
			n += hist[j].cost
			e := float64(hist[j].t - hist[i].t)
			var bound float64
			switch p.Algorithm {
			case policy.TokenBucket, policy.GCRA, policy.LeakyBucket:
				// Each unit adds interval of debt and debt never exceeds tau.
				bound = (l.tau + e) / l.interval
			case policy.SlidingLog:
				if e >= float64(l.window) {
					continue
				}
				bound = float64(p.Limit)
			case policy.FixedWindow, policy.SlidingWindow:
				if p.Calendar != policy.CalendarNone && calendarRef(hist[i].t, p.Calendar) != calendarRef(hist[j].t, p.Calendar) ||
					p.Calendar == policy.CalendarNone && hist[i].t/l.window != hist[j].t/l.window {
					continue
				}
				bound = float64(p.Limit)
			case policy.SlidingBuckets:
				if hist[j].t/l.gran-hist[i].t/l.gran >= int64(l.buckets) {
					continue
				}
				bound = float64(p.Limit)
			default:
				return
			}
			if float64(n) > bound*(1+1e-9) {
				t.Fatalf("%s %+v: admitted %d in [t0%+d, t0%+d], bound %.3f", p.Algorithm, p, n, hist[i].t-t0, hist[j].t-t0, bound)
			}
		}
	}
}

func TestAlgorithmsAgainstReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		data := make([]byte, 8+rng.IntN(600))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		data[0] = byte(i) // cover every algorithm evenly
		p, evs := decode(data)
		checkSequence(t, p, evs)
	}
}

func FuzzAlgorithms(f *testing.F) {
	for i := range len(allParams()) {
		f.Add([]byte{byte(i), 7, 1, 200, 3, 9, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, evs := decode(data)
		checkSequence(t, p, evs)
	})
}
