package grpcserve

import "sync"

// streamWorkers bounds the server's kept goroutines for unary calls; idle
// ones cost only their stacks. A call waits for Redis most of its time,
// so the pool is sized for the calls in flight, not for the cores: a call
// that finds every worker busy gets a goroutine of its own.
const streamWorkers = 256

// workers runs unary calls on kept goroutines, made as calls first need
// them. The worker that finished last takes the next call (last in, first
// out): the garbage collector shrinks an idle goroutine's stack, and a
// decision grows it again, so a few busy workers cost less than many
// taking turns.
type workers struct {
	mu      sync.Mutex
	idle    []chan *stream // the idle workers', the last to finish last
	n       int            // workers made
	stopped bool
}

// dispatch runs st on an idle worker, on a new one while there are fewer
// than streamWorkers, else on a goroutine of its own.
func (w *workers) dispatch(st *stream) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		ch := w.idle[n-1]
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		ch <- st // buffered: the worker waits for nothing else
		return
	}
	keep := w.n < streamWorkers && !w.stopped
	if keep {
		w.n++
	}
	w.mu.Unlock()
	if !keep {
		go st.c.runUnary(st)
		return
	}
	ch := make(chan *stream, 1)
	go w.work(ch)
	ch <- st
}

// work runs the calls sent on ch until the workers stop.
func (w *workers) work(ch chan *stream) {
	for st := range ch {
		st.c.runUnary(st)
		w.mu.Lock()
		if w.stopped {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, ch)
		w.mu.Unlock()
	}
}

// stop ends the idle workers, and the busy ones as they finish.
func (w *workers) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for _, ch := range w.idle {
		close(ch)
	}
	w.idle = nil
}
