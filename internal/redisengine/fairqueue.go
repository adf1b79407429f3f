package redisengine

import (
	"strings"
	"sync"
	"time"
)

// fairQueue holds the calls waiting for a pipeline, one queue per flow
// (the tenant, see flowOf), and hands them to the flushers by deficit
// round robin: each round, every flow with calls waiting may send up to
// quantum calls more. A tenant's backlog thus delays another tenant's
// call by at most one round, not by the backlog: a tenant within its
// share never waits behind another's flood for a pipeline.
//
// While a flow has more than two quanta waiting (heavy: a backlog), the
// caller of a light flow (one that is not: a tenant within its share)
// sends the light flows' calls itself, at once (takeLight): a flood keeps
// the pipelines full and slow on a busy machine, and a light flow's call
// would otherwise wait for one of them to end, and for a flusher to be
// given a CPU.
//
// It never refuses a call: the decider's admission bounds what waits
// (decide.Options.MaxInFlight). A call whose deadline passes while queued
// is taken out and failed by expire, at its deadline, even while every
// flusher waits on Redis.
type fairQueue struct {
	mu     sync.Mutex
	flows  map[string]*flow
	active []*flow // flows with calls waiting, in service order
	next   int     // index in active of the flow served next
	// resume: active[next] was cut short by a full pipeline, and goes on
	// with the deficit it has, without a new quantum.
	resume bool
	free   []*flow // idle flows, for reuse
	closed bool
	// earliest is the earliest deadline of a call queued (zero: none
	// known); it may be earlier than any left, never later.
	earliest time.Time

	ready chan struct{} // a token while calls wait: for the flushers
	poke  chan struct{} // an earlier deadline was queued: for expire

	// heavy is the calls waiting that make a flow heavy; heavyFlows
	// counts the flows above it.
	heavy, heavyFlows int
}

// flow is one tenant's queue.
type flow struct {
	name    string
	units   []*call // FIFO from head; a unit is a call and its rest
	head    int
	deficit int
	active  bool
	// count is the flow's calls not yet answered, units' rests included:
	// waiting here or out in a pipeline (answered ends them).
	count int
}

// quantum is how many calls a flow may send per round.
const quantum = 16

// newFairQueue returns a queue whose flows are heavy above heavy calls
// not yet answered.
func newFairQueue(heavy int) *fairQueue {
	return &fairQueue{flows: map[string]*flow{}, ready: make(chan struct{}, 1), poke: make(chan struct{}, 1),
		heavy: heavy}
}

// add changes f's count of calls not yet answered by n, and heavyFlows
// with it; a flow out of service with none is forgotten.
func (q *fairQueue) add(f *flow, n int) {
	was := f.count > q.heavy
	f.count += n
	switch is := f.count > q.heavy; {
	case is && !was:
		q.heavyFlows++
	case was && !is:
		q.heavyFlows--
	}
	if f.count == 0 && !f.active && q.flows[f.name] == f {
		delete(q.flows, f.name)
		if cap(f.units) <= 64 && len(q.free) < 256 { // no flood's backlog kept
			q.free = append(q.free, f)
		}
	}
}

// answered ends the calls of batch, out of the queue, in their flows'
// counts: one lock per pipeline.
func (q *fairQueue) answered(batch []*call) {
	q.mu.Lock()
	for _, c := range batch {
		if c.flow != nil {
			q.add(c.flow, -1-len(c.rest))
		}
	}
	q.mu.Unlock()
}

// flowOf is the flow of a call on key: the tenant, which policy's counter
// keys open their hash tag with ({<tenant>|…}<rule>), after the engine's
// prefix.
func flowOf(prefix, key string) string {
	key = strings.TrimPrefix(key, prefix)
	if len(key) == 0 || key[0] != '{' {
		return key
	}
	if end := strings.IndexAny(key, "|}"); end > 0 {
		return key[1:end]
	}
	return key
}

// push queues c (with c.rest) in flow name's queue, or returns ErrClosed.
// It reports light when the flow is light while another is heavy: the
// caller is then to send the light flows' calls itself (takeLight).
func (q *fairQueue) push(name string, c *call) (light bool, _ error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false, ErrClosed
	}
	f := q.flows[name]
	if f == nil {
		if n := len(q.free); n > 0 {
			f, q.free = q.free[n-1], q.free[:n-1]
		} else {
			f = &flow{}
		}
		f.name = name
		q.flows[name] = f
	}
	c.flow = f
	f.units = append(f.units, c)
	q.add(f, 1+len(c.rest))
	if !f.active {
		f.active = true
		q.active = append(q.active, f)
	}
	light = f.count <= q.heavy && q.heavyFlows > 0
	poke := !c.deadline.IsZero() && (q.earliest.IsZero() || c.deadline.Before(q.earliest))
	if poke {
		q.earliest = c.deadline
	}
	q.mu.Unlock()
	signal(q.ready)
	if poke {
		signal(q.poke)
	}
	return light, nil
}

// signal leaves a token in ch unless one is there.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// take appends to batch the calls of the next flows in turn, up to about
// max calls (a unit is never split), and returns it.
func (q *fairQueue) take(batch []*call, max int) []*call {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(batch) < max && len(q.active) > 0 {
		if q.next >= len(q.active) {
			q.next, q.resume = 0, false
		}
		f := q.active[q.next]
		if !q.resume {
			f.deficit += quantum
		}
		q.resume = false
		for f.head < len(f.units) {
			u := f.units[f.head]
			size := 1 + len(u.rest)
			if size > f.deficit {
				break
			}
			if len(batch) >= max {
				q.resume = true // this flow goes on next time
				break
			}
			batch = append(append(batch, u), u.rest...)
			f.deficit -= size
			f.units[f.head] = nil
			f.head++
		}
		switch {
		case q.resume:
		case f.head == len(f.units):
			q.retire(q.next) // active[next] is now the flow after it
		default:
			q.next++
		}
	}
	if len(q.active) > 0 {
		signal(q.ready) // for another flusher, or the next pipeline
	}
	return batch
}

// takeLight appends to batch the calls of every light flow (one not
// heavy) while a flow is heavy, up to about max calls, and
// returns it; nothing while no flow is heavy: then the flushers serve
// every flow in turn soon enough.
func (q *fairQueue) takeLight(batch []*call, max int) []*call {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.heavyFlows == 0 {
		return batch
	}
	for i := 0; i < len(q.active) && len(batch) < max; {
		f := q.active[i]
		if f.count > q.heavy {
			i++
			continue
		}
		for _, u := range f.units[f.head:] {
			batch = append(append(batch, u), u.rest...)
		}
		clear(f.units[f.head:])
		f.head = len(f.units)
		q.drop(i)
	}
	return batch
}

// drop retires the emptied flow at index i of active, keeping the round
// robin's place.
func (q *fairQueue) drop(i int) {
	if i == q.next {
		q.resume = false
	}
	q.retire(i)
	if i < q.next {
		q.next--
	}
}

// retire takes the flow at index i of active, emptied, out of service.
func (q *fairQueue) retire(i int) {
	f := q.active[i]
	q.active = append(q.active[:i], q.active[i+1:]...)
	f.units, f.head, f.deficit, f.active = f.units[:0], 0, 0, false
	q.add(f, 0) // forgotten once its calls are answered
}

// expire fails each queued call at its deadline with fail's error, until
// stop is closed; then it fails whatever is queued with ErrClosed.
func (q *fairQueue) expire(stop <-chan struct{}, fail func() error) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		at := q.earliest
		q.mu.Unlock()
		if at.IsZero() {
			timer.Reset(time.Hour)
		} else {
			timer.Reset(time.Until(at))
		}
		select {
		case <-stop:
			q.close()
			return
		case <-q.poke:
			continue
		case <-timer.C:
		}
		q.sweep(time.Now(), fail)
	}
}

// sweep fails the calls whose deadline is not after now, and sets
// earliest to the earliest deadline of those left.
func (q *fairQueue) sweep(now time.Time, fail func() error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var earliest time.Time
	for i := 0; i < len(q.active); {
		f := q.active[i]
		kept := f.units[:f.head]
		for _, u := range f.units[f.head:] {
			if !u.deadline.IsZero() && !u.deadline.After(now) {
				q.add(f, -1-len(u.rest))
				u.flow = nil
				u.finish(fail())
				continue
			}
			if !u.deadline.IsZero() && (earliest.IsZero() || u.deadline.Before(earliest)) {
				earliest = u.deadline
			}
			kept = append(kept, u)
		}
		clear(f.units[len(kept):])
		f.units = kept
		if f.head == len(f.units) {
			q.drop(i)
			continue
		}
		i++
	}
	q.earliest = earliest
}

// close refuses calls from now on and fails those queued with ErrClosed.
func (q *fairQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for len(q.active) > 0 {
		f := q.active[0]
		for _, u := range f.units[f.head:] {
			q.add(f, -1-len(u.rest))
			u.flow = nil
			u.finish(ErrClosed)
		}
		f.head = len(f.units)
		q.retire(0)
	}
}

// finish ends c and the calls of its unit with err, unsent.
func (c *call) finish(err error) {
	for _, u := range append([]*call{c}, c.rest...) {
		u.err = err
		u.end()
	}
}
