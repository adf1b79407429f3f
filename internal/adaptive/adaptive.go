// Package adaptive computes a concurrency limit from what a backend's
// answers show: their latency against the latency without load, and the
// requests dropped (timed out, failed for overload). It is the arithmetic
// of an adaptive_concurrency rule: pure, fed one window of samples at a
// time, with no clock of its own.
package adaptive

import (
	"math"
	"strconv"
	"time"
)

// Window is what one window of a backend's answers showed.
type Window struct {
	// Samples are the answers of the window, Dropped those that timed out
	// or failed for overload (an expired lease counts as dropped).
	Samples, Dropped int
	// MinRTT and MeanRTT are the latencies of the answers not dropped.
	MinRTT, MeanRTT time.Duration
	// MaxInFlight is the most requests in flight at once in the window:
	// a limit is raised only when the load reached it.
	MaxInFlight int
	// Length is how long the window lasted.
	Length time.Duration
}

// Bounds are a limit's floor and ceiling.
type Bounds struct {
	Floor, Ceiling float64
}

// DefaultBounds: a floor of 1, so that a backend of capacity 1 is
// protected, and a ceiling of 10,000.
var DefaultBounds = Bounds{Floor: 1, Ceiling: 10_000}

func (b Bounds) clamp(l float64) float64 { return min(max(l, b.Floor), b.Ceiling) }

// An Algorithm turns one window into the next limit.
type Algorithm interface {
	// Next is the limit after w, from the limit in force during it.
	Next(limit float64, w Window) float64
}

// Gradient compares the latency without load with the window's mean
// latency: while they agree, the backend has room and the limit grows by
// its queue allowance; as requests queue, their latency rises and the
// limit shrinks in proportion (newLimit = limit × noLoad / mean +
// allowance). A window with requests dropped cuts the limit by Backoff.
//
// The latency without load is the least window mean seen since the last
// probe. Every ProbeEvery the limit halves for two windows: the first
// drains the backend's queue, the second measures its latency without
// load afresh. So a backend that truly slowed is followed, and one that
// is always saturated (every request queued) does not make the limit
// creep up.
type Gradient struct {
	Bounds Bounds
	// Allowance is the queue the limit allows, as a share of the limit (0:
	// 5%), and at least a quarter of the limit's square root: it settles
	// about that much above the backend's capacity, and a small limit
	// grows fast while there is room.
	Allowance float64
	// Smoothing is the weight of a window's lower limit against the last
	// (0: 0.5); a higher one applies at once.
	Smoothing float64
	// Backoff multiplies the limit after a window with drops (0: 0.9).
	Backoff float64
	// ProbeEvery is how often the latency without load is measured afresh
	// (0: 30s).
	ProbeEvery time.Duration

	noLoad     time.Duration // 0 until the first window
	sinceProbe time.Duration
	probe      int     // the probe's windows left: 2 draining, 1 measuring
	saved      float64 // the limit before the probe
}

// Next implements Algorithm.
func (g *Gradient) Next(limit float64, w Window) float64 {
	b := cmpBounds(g.Bounds)
	allowance, smoothing, backoff := or(g.Allowance, 0.05), or(g.Smoothing, 0.5), or(g.Backoff, 0.9)
	probeEvery := g.ProbeEvery
	if probeEvery == 0 {
		probeEvery = 30 * time.Second
	}
	g.sinceProbe += w.Length
	switch g.probe {
	case 2: // drained: now measure
		g.probe = 1
		return limit
	case 1: // measured
		g.probe = 0
		if w.Dropped == 0 && w.MeanRTT > 0 {
			g.noLoad = w.MeanRTT
		}
		return b.clamp(g.saved)
	}
	if w.Samples == 0 {
		return b.clamp(limit)
	}
	if w.Dropped > 0 {
		return b.clamp(limit * backoff)
	}
	if w.MeanRTT > 0 && (g.noLoad == 0 || w.MeanRTT < g.noLoad) {
		g.noLoad = w.MeanRTT
	}
	if w.MeanRTT <= 0 || g.noLoad == 0 {
		return b.clamp(limit)
	}
	gradient := min(max(float64(g.noLoad)/float64(w.MeanRTT), 0.5), 1)
	next := limit*gradient + max(allowance*limit, math.Sqrt(limit)/4)
	if next > limit && float64(w.MaxInFlight) < limit/2 {
		// The load did not reach the limit: nothing says the backend
		// takes more.
		next = limit
	}
	if next < limit { // down smoothly; up at once, while there is room
		next = (1-smoothing)*limit + smoothing*next
	}
	next = b.clamp(next)
	if g.sinceProbe >= probeEvery && next > 2*b.Floor {
		g.sinceProbe, g.probe, g.saved = 0, 2, next
		return b.clamp(next / 2)
	}
	return next
}

// NoLoad is the latency without load Gradient estimates.
func (g *Gradient) NoLoad() time.Duration { return g.noLoad }

// SetNoLoad starts g from the latency without load another measured: an
// updater taking over from another goes on from its estimate, rather
// than taking the queued latency of its first window for it.
func (g *Gradient) SetNoLoad(d time.Duration) { g.noLoad = d }

// AIMD raises the limit by Increase a window while the load reaches it
// and nothing is dropped, and multiplies it by Backoff when a window has
// drops, or latency past Threshold.
type AIMD struct {
	Bounds Bounds
	// Increase is added a window (0: 1); Backoff multiplies (0: 0.9).
	Increase, Backoff float64
	// Threshold is a mean latency taken as overload (0: none).
	Threshold time.Duration
}

// Next implements Algorithm.
func (a *AIMD) Next(limit float64, w Window) float64 {
	b := cmpBounds(a.Bounds)
	increase, backoff := or(a.Increase, 1), or(a.Backoff, 0.9)
	switch {
	case w.Samples == 0:
		return b.clamp(limit)
	case w.Dropped > 0 || a.Threshold > 0 && w.MeanRTT > a.Threshold:
		return b.clamp(limit * backoff)
	case float64(w.MaxInFlight) >= limit/2:
		return b.clamp(limit + increase)
	}
	return b.clamp(limit)
}

func or(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

func cmpBounds(b Bounds) Bounds {
	if b == (Bounds{}) {
		return DefaultBounds
	}
	if b.Ceiling == 0 {
		b.Ceiling = math.Inf(1)
	}
	return b
}

// Outcome is how a request guarded by an adaptive limit ended, as its
// lease's release tells.
type Outcome uint8

// Outcomes.
const (
	// Succeeded: the backend answered; its latency is a sample.
	Succeeded Outcome = iota
	// Dropped: it timed out or was refused for overload (a 503, a 429
	// from the backend), or its lease expired unreleased: a sign of
	// overload.
	Dropped
	// Ignored: it ended early for reasons of its own (the client left, a
	// 4xx): no sample.
	Ignored
)

var outcomeNames = [...]string{"success", "dropped", "ignored"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// ParseOutcome returns the outcome named s; "" is Succeeded.
func ParseOutcome(s string) (Outcome, bool) {
	if s == "" {
		return Succeeded, true
	}
	for i, n := range outcomeNames {
		if n == s {
			return Outcome(i), true
		}
	}
	return Succeeded, false
}
