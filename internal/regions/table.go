// Package regions holds a limit once across regions (policy.ScopeGlobal).
// Each region's deciders count a global rule exactly in their own Redis;
// each decider publishes what it admitted, per counter and window, to its
// region's Kafka topic, and reads the other regions' topics. A decision
// adds the other regions' last counts to its own region's
// (limit.Args.Spent): no decision waits on another region.
//
// The counts are a grow-only counter per counter and window: one count per
// decider run, each only ever raised, merged by taking the larger. A
// message read twice, late or out of order changes nothing.
package regions

import (
	"math"
	"strconv"
	"sync"
	"time"
)

// Assumption is what a decider takes a silent region (one it has not heard
// from for Config.Silence) to spend of a global limit.
type Assumption uint8

const (
	// AssumeLastRate: the silent region goes on admitting, per counter and
	// window, as much as in the last windows heard of it (the larger of the
	// latest and the one before).
	AssumeLastRate Assumption = iota
	// AssumeShare: the silent region takes Config.Share of each limit in
	// each window, or what it was last heard to take when that is more.
	AssumeShare
)

// window names one counter's window: its key and its start, in µs.
type window struct {
	key   string
	start int64
}

// runCount is one decider run's count of a window.
type runCount struct {
	region        string
	n, at         int64 // the count, and when it was sent (µs)
	end, duration int64 // the window's end and length (µs), for expiry
}

// runLast is what a decider run last admitted of a counter: the count of
// the latest window heard of, and of the window before it.
type runLast struct {
	region   string
	start, n int64 // the latest window heard of, and its count
	prevN    int64 // the count of the window before it
	at       int64 // when last heard (µs)
	duration int64 // the counter's window, for expiry
}

// Table is one decider's view of the other regions' counts of global
// rules, and of its own admissions yet to publish. It is safe for
// concurrent use.
type Table struct {
	region  string
	silence int64 // µs
	assume  Assumption
	share   float64

	mu     sync.Mutex
	others map[window]map[string]*runCount // by run
	last   map[string]map[string]*runLast  // by counter key, by run
	heard  map[string]int64                // region → when last heard (µs)
	got    map[string]bool                 // regions heard from at least once
	own    map[window]*ownCount

	// Meters (token buckets and GCRA): this decider's admissions since it
	// began counting each, and the other regions' runs' counts to charge
	// into this region's Redis.
	ownMeters map[string]*ownMeter
	meters    map[meterRun]*remoteMeter
}

// ownMeter is this decider's admissions on a meter since start (µs).
type ownMeter struct {
	start, n, lastAt int64
	interval         float64
	dirty            bool
}

// meterRun names one run's count of one meter: a run counts a meter
// afresh (a new start) after leaving it idle.
type meterRun struct {
	key, run string
	start    int64
}

// remoteMeter is a run's count of a meter, and what of it was charged:
// its count, or more while its region is silent (takeCharges).
type remoteMeter struct {
	region     string
	n, charged int64
	interval   float64
	at         int64   // when last heard (µs)
	rate       float64 // its rise per µs over the last rateSpan, for a silent region's
	samples    []meterSample
}

// meterSample is a run's count of a meter when sent (µs).
type meterSample struct{ at, n int64 }

// rateSpan is the span a meter's rate is measured over, the latest: a
// shorter one follows the noise of single intervals, a longer one the
// burst a bucket began with.
const rateSpan = time.Second

// Charge is what another region's decider run admitted on a meter, to
// charge into this region's Redis once (Config.Apply): Count, only ever
// raised, of Interval µs a unit.
type Charge struct {
	Key, Run string
	Count    int64
	Interval float64
}

// meterIdle is how long a meter's counts are kept without a rise.
const meterIdle = time.Hour

// ownCount is this decider's admissions in one window.
type ownCount struct {
	n, end int64
	dirty  bool
}

// newTable returns an empty table of region. It takes the regions it
// expects to hear from as heard at start, so that one silent from the
// start is silent after silence.
func newTable(region string, regions []string, silence time.Duration, assume Assumption, share float64, start time.Time) *Table {
	t := &Table{region: region, silence: silence.Microseconds(), assume: assume, share: share,
		others: map[window]map[string]*runCount{}, last: map[string]map[string]*runLast{}, heard: map[string]int64{}, got: map[string]bool{}, own: map[window]*ownCount{},
		ownMeters: map[string]*ownMeter{}, meters: map[meterRun]*remoteMeter{}}
	for _, r := range regions {
		if r != region {
			t.heard[r] = start.UnixMicro()
		}
	}
	return t
}

// Spent is what the other regions spent of a limit of limit units in the
// window of key starting at start (µs), plus, for a sliding window, weight
// times what they spent in the window before it, starting at prev: as
// last heard, and for a silent region as the Assumption has it.
func (t *Table) Spent(key string, start, prev int64, weight float64, limit int64, now time.Time) int64 {
	at := now.UnixMicro()
	t.mu.Lock()
	defer t.mu.Unlock()
	spent := t.regionCounts(window{key, start}, limit, at)
	if weight > 0 {
		spent += weight * t.regionCounts(window{key, prev}, limit, at)
	}
	return int64(math.Ceil(spent))
}

// regionCounts sums the other regions' counts of w, at µs: a silent
// region's as the Assumption has it. t.mu is held.
func (t *Table) regionCounts(w window, limit, at int64) float64 {
	runs := t.others[w]
	var sum float64
	for region, heard := range t.heard {
		var n float64
		for _, rc := range runs {
			if rc.region == region {
				n += float64(rc.n)
			}
		}
		if at-heard > t.silence {
			switch t.assume {
			case AssumeShare:
				n = max(n, t.share*float64(limit))
			case AssumeLastRate: // as much as in the last windows heard of
				var last float64
				for _, rl := range t.last[w.key] {
					if rl.region == region {
						last += float64(max(rl.n, rl.prevN))
					}
				}
				n = max(n, last)
			}
		}
		sum += n
	}
	return sum
}

// Admitted notes that this decider admitted cost on key in the window
// [start, end) (µs), to publish.
func (t *Table) Admitted(key string, start, end, cost int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := window{key, start}
	oc := t.own[w]
	if oc == nil {
		oc = &ownCount{end: end}
		t.own[w] = oc
	}
	oc.n += cost
	oc.dirty = true
}

// AdmittedMeter notes that this decider admitted cost on the meter key of
// interval µs a unit, at µs, to publish.
func (t *Table) AdmittedMeter(key string, interval float64, cost, at int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.ownMeters[key]
	if m == nil {
		m = &ownMeter{start: at, interval: interval}
		t.ownMeters[key] = m
	}
	m.n += cost
	m.lastAt, m.dirty = at, true
}

// takeCharges returns the other regions' meter counts that rose since the
// last take, at µs, for Config.Apply; a failed charge is given back (owe).
// A silent region's runs are taken to go on as the Assumption has it: at
// their last rate, or at Share of the meter's own. What was charged is
// never taken back: when the region is heard again, its runs are charged
// once their counts pass what was assumed.
func (t *Table) takeCharges(at int64) []Charge {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Charge
	for mr, m := range t.meters {
		target := m.n
		// A run that had stopped rising before its region fell silent (a
		// decider gone, a meter idle) is not taken to go on.
		if heard, ok := t.heard[m.region]; ok && at-heard > t.silence && heard-m.at <= t.silence && at > m.at {
			since := float64(at - m.at)
			assumed := m.rate * since
			if t.assume == AssumeShare {
				assumed = max(assumed, t.share*since/m.interval)
			}
			target += int64(assumed)
		}
		if target > m.charged {
			out = append(out, Charge{Key: mr.key, Run: mr.run + "@" + strconv.FormatInt(mr.start, 10), Count: target, Interval: m.interval})
			m.charged = target
		}
	}
	return out
}

// owe marks charges as not made, to try again.
func (t *Table) owe(charges []Charge) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for mr, m := range t.meters {
		for _, c := range charges {
			if c.Key == mr.key && c.Run == mr.run+"@"+strconv.FormatInt(mr.start, 10) {
				m.charged = min(m.charged, c.Count-1)
			}
		}
	}
}

// merge takes in one run's counts, sent at sentAt (µs) from region; it
// ignores the decider's own region, whose count is in its Redis.
func (t *Table) merge(region, run string, sentAt int64, counts []count) {
	if region == t.region {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.heard[region] = max(t.heard[region], sentAt)
	t.got[region] = true
	for _, c := range counts {
		if c.interval > 0 { // a meter: charged into this region's Redis
			mr := meterRun{c.key, run, c.start}
			m := t.meters[mr]
			if m == nil {
				m = &remoteMeter{region: region, interval: c.interval, n: c.n, at: sentAt, samples: []meterSample{{sentAt, c.n}}}
				t.meters[mr] = m
			}
			if sentAt > m.at {
				m.noteRate(sentAt, max(c.n, m.n))
			}
			m.n, m.at = max(m.n, c.n), max(m.at, sentAt)
			continue
		}
		w := window{c.key, c.start}
		runs := t.others[w]
		if runs == nil {
			runs = map[string]*runCount{}
			t.others[w] = runs
		}
		rc := runs[run]
		switch {
		case rc == nil:
			runs[run] = &runCount{region: region, n: c.n, at: sentAt, end: c.end, duration: c.end - c.start}
		case c.n > rc.n:
			rc.n, rc.at = c.n, max(rc.at, sentAt)
		}
		t.noteLast(region, run, sentAt, c)
	}
}

// noteRate takes in a run's count n sent at µs, later than any before,
// and measures its rate over the latest rateSpan, once it has one.
func (m *remoteMeter) noteRate(at, n int64) {
	m.samples = append(m.samples, meterSample{at, n})
	from := 0 // the latest sample a span or more before at
	for i, s := range m.samples {
		if s.at <= at-rateSpan.Microseconds() {
			from = i
		}
	}
	m.samples = append(m.samples[:0], m.samples[from:]...)
	if first := m.samples[0]; at-first.at >= rateSpan.Microseconds() {
		m.rate = float64(n-first.n) / float64(at-first.at)
	}
}

// noteLast keeps what a run last admitted of a counter. t.mu is held.
func (t *Table) noteLast(region, run string, sentAt int64, c count) {
	runs := t.last[c.key]
	if runs == nil {
		runs = map[string]*runLast{}
		t.last[c.key] = runs
	}
	rl := runs[run]
	switch {
	case rl == nil:
		runs[run] = &runLast{region: region, start: c.start, n: c.n, at: sentAt, duration: c.end - c.start}
	case c.start > rl.start:
		rl.prevN = 0
		if c.start == rl.start+rl.duration { // the next window: the one before is rl's
			rl.prevN = rl.n
		}
		rl.start, rl.n, rl.at = c.start, c.n, max(rl.at, sentAt)
	case c.start == rl.start:
		rl.n, rl.at = max(rl.n, c.n), max(rl.at, sentAt)
	}
}

// count is one counter's count in one window, as published; a meter's
// (interval > 0) since start.
type count struct {
	key        string
	start, end int64
	n          int64
	interval   float64
}

// takeOwn returns this decider's counts raised since the last take, and
// forgets those of windows over before at (µs).
func (t *Table) takeOwn(at int64) []count {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []count
	for w, oc := range t.own {
		if oc.dirty {
			out = append(out, count{key: w.key, start: w.start, end: oc.end, n: oc.n})
			oc.dirty = false
		}
		if oc.end < at {
			delete(t.own, w)
		}
	}
	for key, m := range t.ownMeters {
		if m.dirty {
			out = append(out, count{key: key, start: m.start, n: m.n, interval: m.interval})
			m.dirty = false
		} else if at-m.lastAt > meterIdle.Microseconds() {
			delete(t.ownMeters, key)
		}
	}
	return out
}

// raise marks counts to publish again, after a write that failed.
func (t *Table) raise(counts []count) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range counts {
		if c.interval > 0 {
			if m := t.ownMeters[c.key]; m != nil && m.start == c.start {
				m.dirty = true
			}
			continue
		}
		w := window{c.key, c.start}
		oc := t.own[w]
		if oc == nil {
			oc = &ownCount{n: c.n, end: c.end}
			t.own[w] = oc
		}
		oc.dirty = true
	}
}

// expire forgets the other regions' counts of windows that a sliding
// window no longer reaches at at (µs), one window past their end, and
// the last counts of regions heard from that are three windows old.
func (t *Table) expire(at int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for w, runs := range t.others {
		for run, rc := range runs {
			if rc.end+rc.duration < at {
				delete(runs, run)
			}
		}
		if len(runs) == 0 {
			delete(t.others, w)
		}
	}
	for mr, m := range t.meters {
		if at-m.at > meterIdle.Microseconds() && m.charged >= m.n {
			delete(t.meters, mr)
		}
	}
	for key, runs := range t.last {
		for run, rl := range runs {
			// A silent region's last counts stand in for its traffic
			// until it is heard again.
			if rl.start+3*rl.duration < at && at-t.heard[rl.region] <= t.silence {
				delete(runs, run)
			}
		}
		if len(runs) == 0 {
			delete(t.last, key)
		}
	}
}

// Unheard returns the regions not yet heard from: a decider starting adds
// a region's counts once its reader has reached that region's topic.
func (t *Table) Unheard() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for r := range t.heard {
		if !t.got[r] {
			out = append(out, r)
		}
	}
	return out
}

// Silent returns the regions not heard from for the silence, at now.
func (t *Table) Silent(now time.Time) []string {
	at := now.UnixMicro()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for r, heard := range t.heard {
		if at-heard > t.silence {
			out = append(out, r)
		}
	}
	return out
}
