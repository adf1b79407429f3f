package grpcserve

import (
	"context"
	"sync"
	"time"
)

// callCtx is a call's context: its values are the connection's and the
// call's metadata (parent), its deadline the call's grpc-timeout, and it
// ends when the client resets the call, the connection ends or the
// deadline passes. A unary call's is kept with its pooled stream and
// costs no allocation while calls end well: context.WithCancel's cost
// three (its context, its cancel function and, once waited on, its
// channel). Its channel and timer serve call after call; a channel is
// made again only after one was closed. So nothing may keep a call's
// context past the call, as gRPC's own rule for a handler's context has
// it: the next call on the stream reuses it.
type callCtx struct {
	// Set by start, before the call runs, by the stream's owner.
	parent   context.Context
	deadline time.Time

	mu    sync.Mutex
	done  chan struct{} // made by Done, or kept from an earlier call; closed when the call ends early
	err   error
	timer *time.Timer // fires expire at the deadline
}

// start readies c for a call of parent's values and deadline (zero: none).
func (c *callCtx) start(parent context.Context, deadline time.Time) {
	c.parent = parent
	if deadline.IsZero() && c.timer == nil { // no timer reads the deadline: no lock
		c.deadline = deadline
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = deadline
	if deadline.IsZero() {
		return
	}
	d := time.Until(deadline)
	if d <= 0 {
		c.endLocked(context.DeadlineExceeded)
		return
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(d, c.expire)
	} else {
		c.timer.Reset(d)
	}
}

// expire ends c when its deadline has passed: a timer of an earlier call
// that fires late finds a later deadline, or none, and does nothing.
func (c *callCtx) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
		c.endLocked(context.DeadlineExceeded)
	}
}

// cancel ends c: the client reset the call, or the connection ended.
func (c *callCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endLocked(context.Canceled)
}

func (c *callCtx) endLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	if c.done == nil {
		c.done = closedChan
	} else {
		close(c.done)
	}
}

// finish ends the call's use of c, keeping what the next call may reuse.
func (c *callCtx) finish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.err != nil {
		c.done = nil // closed: the next call needs a new one
	}
	c.err = nil
}

var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

func (c *callCtx) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

func (c *callCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *callCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *callCtx) Value(key any) any { return c.parent.Value(key) }
