package adaptive

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// sim is a backend of workers serving one request each for about
// service, a queue in front of them, and clients arriving at rate a
// second behind a concurrency limit computed by alg each window: all on
// virtual time, from a fixed seed.
type sim struct {
	rng      *rand.Rand
	now      time.Duration
	workers  int
	service  time.Duration
	jitter   float64 // service times spread ± this share
	timeout  time.Duration
	rate     float64 // arrivals a second
	window   time.Duration
	alg      Algorithm
	limit    float64
	events   eventQueue
	queue    []*request // waiting for a worker
	busy     int
	inFlight int // admitted, neither answered nor timed out

	// The window being gathered.
	w          Window
	rttSum     time.Duration
	windowFrom time.Duration

	// What a run records.
	limits    []float64       // each window's limit
	latencies []time.Duration // of the answers in time
	answered  int             // in time
	shed      int
}

type request struct {
	arrived time.Duration
	done    bool // answered or timed out
}

type event struct {
	at   time.Duration
	kind int // arrival, completion, timeout, tick
	req  *request
}

const (
	arrival = iota
	completion
	timeout
	tick
)

type eventQueue []event

func (q eventQueue) Len() int           { return len(q) }
func (q eventQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q eventQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)        { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func newSim(seed uint64, workers int, service time.Duration, rate float64, alg Algorithm, initial float64) *sim {
	s := &sim{rng: rand.New(rand.NewPCG(seed, 1)), workers: workers, service: service, jitter: 0.1, timeout: 10 * service,
		rate: rate, window: 100 * time.Millisecond, alg: alg, limit: initial}
	heap.Push(&s.events, event{at: s.nextArrival(), kind: arrival})
	heap.Push(&s.events, event{at: s.window, kind: tick})
	return s
}

func (s *sim) nextArrival() time.Duration {
	return s.now + time.Duration(s.rng.ExpFloat64()/s.rate*float64(time.Second))
}

func (s *sim) serviceTime() time.Duration {
	return time.Duration(float64(s.service) * (1 + s.jitter*(2*s.rng.Float64()-1)))
}

// run advances the simulation to until, recording from record on.
func (s *sim) run(until, record time.Duration) {
	for s.events.Len() > 0 && s.events[0].at <= until {
		e := heap.Pop(&s.events).(event)
		s.now = e.at
		switch e.kind {
		case arrival:
			heap.Push(&s.events, event{at: s.nextArrival(), kind: arrival})
			if float64(s.inFlight) >= math.Floor(s.limit) {
				s.shed++
				continue
			}
			r := &request{arrived: s.now}
			s.inFlight++
			s.w.MaxInFlight = max(s.w.MaxInFlight, s.inFlight)
			heap.Push(&s.events, event{at: s.now + s.timeout, kind: timeout, req: r})
			s.queue = append(s.queue, r)
			s.dispatch()
		case completion:
			s.busy--
			if r := e.req; !r.done {
				r.done = true
				s.inFlight--
				rtt := s.now - r.arrived
				s.w.Samples++
				s.rttSum += rtt
				if s.w.MinRTT == 0 || rtt < s.w.MinRTT {
					s.w.MinRTT = rtt
				}
				if s.now >= record {
					s.latencies = append(s.latencies, rtt)
					s.answered++
				}
			}
			s.dispatch()
		case timeout:
			if r := e.req; !r.done { // the client gives up; the backend works on
				r.done = true
				s.inFlight--
				s.w.Samples++
				s.w.Dropped++
			}
		case tick:
			heap.Push(&s.events, event{at: s.now + s.window, kind: tick})
			if ok := s.w.Samples - s.w.Dropped; ok > 0 {
				s.w.MeanRTT = s.rttSum / time.Duration(ok)
			}
			s.w.Length = s.now - s.windowFrom
			s.limit = s.alg.Next(s.limit, s.w)
			s.w, s.rttSum, s.windowFrom = Window{MaxInFlight: s.inFlight}, 0, s.now
			if g, ok := s.alg.(*Gradient); s.now > record && (!ok || g.probe == 0) {
				s.limits = append(s.limits, s.limit) // a probe's two windows aside
			}
		}
	}
	s.now = until
}

// dispatch starts queued requests on free workers.
func (s *sim) dispatch() {
	for s.busy < s.workers && len(s.queue) > 0 {
		r := s.queue[0]
		s.queue = s.queue[1:]
		if r.done { // timed out while queued: its client has gone
			continue
		}
		s.busy++
		heap.Push(&s.events, event{at: s.now + s.serviceTime(), kind: completion, req: r})
	}
}

// reset forgets what was recorded.
func (s *sim) reset() { s.limits, s.latencies, s.answered, s.shed = nil, nil, 0, 0 }

// stats are a recording's limit mean and coefficient of variation, and the
// answers' p99.
func (s *sim) stats() (mean, cv float64, p99 time.Duration) {
	for _, l := range s.limits {
		mean += l
	}
	mean /= float64(len(s.limits))
	var v float64
	for _, l := range s.limits {
		v += (l - mean) * (l - mean)
	}
	cv = math.Sqrt(v/float64(len(s.limits))) / mean
	l := slices.Clone(s.latencies)
	slices.Sort(l)
	if len(l) > 0 {
		p99 = l[len(l)*99/100]
	}
	return mean, cv, p99
}
