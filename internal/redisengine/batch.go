package redisengine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
)

// call is one decision waiting for a pipeline.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	reply  []int64
	err    error
	done   chan struct{}
	// deadline is the caller's (zero: none): past it, a call not yet sent
	// is overload (see flush).
	deadline time.Time
	// sent is set once the call is in a pipeline written to Redis: from
	// then on, its wait is Redis's doing.
	sent atomic.Bool
	// rest are the calls queued with this one as a unit: the other
	// decisions of its batch (see AllowBatch).
	rest []*call
	// flow is the queue's flow of the unit c heads, until it is answered.
	flow *flow

	// Room for keys and args of one key (see prepare).
	keyArr [1]string
	argArr [flatArgs + 6]any // a flat script's arguments: 6 group fields
}

// A call's done channel carries its one answer (end): buffered, so that
// the one who answers never waits, and pooled, since a waiter that took
// the answer leaves it empty for another call. One a waiter gave up on
// is not pooled again.
var doneChans = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

func newDone() chan struct{} { return doneChans.Get().(chan struct{}) }

// end tells c's waiter that c is answered (c.reply, c.err).
func (c *call) end() { c.done <- struct{}{} }

// flushTimeout bounds a pipeline none of whose calls has a deadline.
const flushTimeout = 5 * time.Second

// ErrClosed is returned for decisions made after Close.
var ErrClosed = errors.New("redisengine: engine closed")

// ErrStalled is the error of a call whose deadline passed while it was
// queued behind a pipeline Redis did not answer: its wait was Redis's
// doing, not the decider's, so it is store trouble, answered by each
// rule's failure mode, never overload. It counts neither as a failure nor
// toward a breaker: the pipeline it waited on does.
var ErrStalled = errors.New("redisengine: queued behind a pipeline Redis did not answer")

// expired is the error of a call whose deadline passed before it was
// sent: ErrStalled while the last pipeline failed (Redis has stopped
// answering), else limit.ErrOverloaded (the decider's own queue).
func (e *Engine) expired(err error) error {
	if e.failing.Load() {
		return fmt.Errorf("%w: %w", ErrStalled, err)
	}
	return fmt.Errorf("%w: %w", limit.ErrOverloaded, err)
}

// batched queues a call for the flushers and waits for it or for ctx. A
// call whose deadline passes before it is sent fails with
// limit.ErrOverloaded (the wait was the decider's queue, not Redis), or
// ErrStalled (it waited behind a pipeline Redis did not answer). Once
// sent, it waits for its pipeline, which Config.Timeout bounds from the
// moment it is written. The deadline need not be ctx's (a decision's
// budget costs no timer of its own): the queue fails the calls it holds
// at their deadlines (fairQueue.expire).
func (e *Engine) batched(ctx context.Context, deadline time.Time, c *call, sc *redis.Script, keys []string, args []any) ([]int64, error) {
	if c == nil {
		c = &call{}
	}
	c.script, c.keys, c.args, c.done, c.deadline = sc, keys, args, newDone(), deadline
	if err := e.push(keys[0], c); err != nil {
		return nil, err
	}
	return e.wait(ctx, c)
}

// wait waits for c's answer or the end of ctx.
func (e *Engine) wait(ctx context.Context, c *call) ([]int64, error) {
	select {
	case <-c.done:
		doneChans.Put(c.done) // taken: its one answer came
		return c.reply, c.err
	case <-ctx.Done():
		return nil, e.queuedErr(ctx.Err(), !c.sent.Load()) // the flusher or the queue finishes it; nobody reads it
	}
}

// queuedErr is err, the end of a call's context, as the decider should
// read it: a deadline that passed while the call was still queued is
// overload, or store trouble behind a failed pipeline (expired).
func (e *Engine) queuedErr(err error, queued bool) error {
	if queued && errors.Is(err, context.DeadlineExceeded) {
		return e.expired(err)
	}
	return err
}

// queue hands unit, the calls of one batch (see AllowBatch), to the
// flushers as one, so that they share a pipeline; when it cannot, it
// fails every call of it.
func (e *Engine) queue(unit []*call) {
	unit[0].rest = unit[1:]
	if err := e.push(unit[0].keys[0], unit[0]); err != nil {
		unit[0].finish(err)
	}
}

// flusher sends queued calls as pipelines: it takes what is queued, each
// tenant in turn (fairQueue), waiting up to BatchWait for more, up to
// about BatchSize (a unit is never split).
func (e *Engine) flusher() {
	batch := make([]*call, 0, e.cfg.BatchSize)
	for {
		select {
		case <-e.waiting.ready:
		case <-e.stop:
			return
		}
		// Let the goroutines made runnable with the first call (other
		// requests' handlers, mid-decision) queue theirs before collecting:
		// under load pipelines carry half as many again, each costing Redis
		// less per decision; alone, a call goes at once.
		runtime.Gosched()
		batch = e.waiting.take(batch[:0], e.cfg.BatchSize)
		if e.cfg.BatchWait > 0 && len(batch) < e.cfg.BatchSize {
			timer := time.NewTimer(e.cfg.BatchWait)
		collect:
			for len(batch) < e.cfg.BatchSize {
				select {
				case <-e.waiting.ready:
					batch = e.waiting.take(batch, e.cfg.BatchSize)
				case <-timer.C:
					break collect
				}
			}
			timer.Stop()
		}
		if len(batch) > 0 {
			e.flush(batch)
		}
	}
}

// push queues c (with c.rest) for the flushers, under the flow of key,
// and sends the light flows' calls at once itself while another flow is
// heavy (fairQueue.takeLight): no flusher, busy with a flood's full
// pipelines, nor the wait for one to be given a CPU, holds them up.
func (e *Engine) push(key string, c *call) error {
	light, err := e.waiting.push(flowOf(e.cfg.Prefix, key), c)
	if light {
		if batch := e.waiting.takeLight(nil, e.cfg.BatchSize); len(batch) > 0 {
			e.flush(batch)
		}
	}
	return err
}

// Pipelines returns how many pipelines the batching engine has sent and
// how many decisions' calls they carried: their ratio is the mean batch, a
// measure of how much batching saves (each pipeline is one write and one
// read on both sides).
func (e *Engine) Pipelines() (pipelines, calls int64) {
	return e.pipelines.Load(), e.pipelined.Load()
}

// flush runs batch as one pipeline of EVALSHA, which Redis must answer
// within Config.Timeout of its writing, or by the earliest deadline of
// its calls when that is later (flushTimeout when no call has one: a
// caller without a budget), else every call of it fails: that is Redis's
// failure. A call whose deadline passed in the queue fails at
// once with limit.ErrOverloaded, the decider's overload, and is not sent;
// or with ErrStalled when the pipeline before it failed (Engine.failing).
// Pipelines do not fall back to EVAL by themselves: on NOSCRIPT (a
// restarted or flushed Redis) the script is loaded and the refused calls
// are sent once more.
func (e *Engine) flush(batch []*call) {
	now := time.Now()
	var earliest time.Time // of the calls' deadlines
	pending := batch[:0]   // in place: the flusher reuses batch
	for _, c := range batch {
		if !c.deadline.IsZero() {
			if !c.deadline.After(now) {
				if c.flow != nil {
					e.waiting.answered([]*call{c})
				}
				c.err = e.expired(context.DeadlineExceeded)
				c.end()
				continue
			}
			if earliest.IsZero() || c.deadline.Before(earliest) {
				earliest = c.deadline
			}
		}
		c.sent.Store(true)
		pending = append(pending, c)
	}
	deadline := now.Add(flushTimeout)
	if !earliest.IsZero() { // the Redis timeout, or the calls' budgets when they leave more
		deadline = now.Add(max(e.cfg.Timeout, earliest.Sub(now)))
	}
	if len(pending) == 0 {
		return
	}
	defer e.waiting.answered(pending)
	e.pipelines.Add(1)
	e.pipelined.Add(int64(len(pending)))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ws := e.wires(pending)
	for attempt := 0; attempt < 2 && len(ws) > 0; attempt++ {
		pipe := e.client.Pipeline()
		cmds := make([]*redis.IntSliceCmd, len(ws))
		for i, w := range ws {
			cmds[i] = evalShaOnce(ctx, pipe, w.script, w.keys, w.args, e.cluster != nil)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		e.failing.Store(pipelineFailed(cmds))
		var retry []wire
		for i, w := range ws {
			reply, err := cmds[i].Result()
			e.followTopology(err)
			if err != nil && ctx.Err() != nil {
				err = ctx.Err() // a network timeout at the deadline, as the caller's own deadline would say
			}
			if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
				retry = append(retry, w)
				continue
			}
			if err != nil && slotMoving(err) {
				w.calls = slices.Clone(w.calls) // the flusher reuses the batch's array
				go e.runAlone(w, deadline)
				continue
			}
			w.answer(reply, err)
		}
		if len(retry) > 0 {
			if err := e.Preload(ctx); err != nil {
				for _, w := range retry {
					w.answer(nil, err)
				}
				return
			}
		}
		ws = retry
	}
}

// pipelineFailed reports whether Redis failed to answer cmds: one of them
// ended in a network error or a timeout rather than a reply (a script's
// error, NOSCRIPT, a moved slot are answers).
func pipelineFailed(cmds []*redis.IntSliceCmd) bool {
	for _, c := range cmds {
		var reply redis.Error
		if err := c.Err(); err != nil && err != redis.Nil && !errors.As(err, &reply) {
			return true
		}
	}
	return false
}

// onceCmd is a command go-redis sends once. A cluster pipeline otherwise
// sends a node's whole batch again when the first command's answer is a
// retryable error (TRYAGAIN while a slot moves, LOADING, …), the commands
// that ran included, and their decisions count twice; and any pipeline
// resends its batch after a connection fails mid-read, when some may have
// run. A call refused is answered by its failure mode, or sent again by
// runAlone when nothing ran (slotMoving); never run twice.
type onceCmd struct{ *redis.IntSliceCmd }

// NoRetry tells go-redis not to send the command again.
func (onceCmd) NoRetry() bool { return true }

// evalShaOnce queues EVALSHA of sc on pipe as an onceCmd, read as the
// array of integers every script answers (go-redis's generic Cmd boxes
// each one, most of them an allocation). Off a cluster
// the keys go as pointers, which go-redis writes as their strings: a
// string made an interface is a copy of it on the heap, one per decision.
// A cluster client reads the first key's slot from the command, and needs
// it a string.
func evalShaOnce(ctx context.Context, pipe redis.Pipeliner, sc *redis.Script, keys []string, args []any, cluster bool) *redis.IntSliceCmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", sc.Hash(), len(keys))
	for i := range keys {
		if cluster {
			cmdArgs = append(cmdArgs, keys[i])
		} else {
			cmdArgs = append(cmdArgs, &keys[i])
		}
	}
	cmd := redis.NewIntSliceCmd(ctx, append(cmdArgs, args...)...)
	_ = pipe.Process(ctx, onceCmd{cmd})
	return cmd
}

// runAlone sends w by itself (runScript) before deadline, in its own
// goroutine: the calls a cluster node refused while their slot moves
// (slotMoving) wait for it without holding up the flusher's next
// pipelines.
func (e *Engine) runAlone(w wire, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	reply, err := e.runScript(ctx, w.script, w.keys, w.args)
	w.answer(reply, err)
}

// wire is one EVALSHA of a pipeline: one call, or calls merged into one
// (see wires).
type wire struct {
	script *redis.Script
	keys   []string
	args   []any
	calls  []*call
	// groups are the parameter groups of merged flat calls (flat.lua),
	// which go after the keys' costs and groups.
	groups [][]any
	// decisions are the decisions' arguments of merged multi.lua calls,
	// which go after their groups.
	decisions []any
}

// decideArgs is how many of decide.lua's arguments come before the rules'
// fields: now, slack, minimum TTL and the op.
const decideArgs = 4

// wires turns a pipeline's calls into its EVALSHAs. The calls of
// single.lua, those of window1.lua and those of multi.lua, with the same
// clock argument, become one call of each script for all their decisions,
// each rule's parameters sent once; decide.lua's checks become one
// "checks" call. The decisions are independent and Redis
// runs them in the pipeline's order, as it would have run the calls, and
// its cost of a call (about a third of single.lua's, more of decide.lua's,
// whose function definitions run on every call) is then paid once per
// pipeline. On a cluster each call stays alone, its keys' slot being its
// own.
func (e *Engine) wires(calls []*call) []wire {
	ws := make([]wire, 0, min(len(calls), 4)) // merged, the calls are mostly a wire or two
	merged := [4]int{-1, -1, -1, -1}          // the index in ws of single.lua's, window1.lua's, multi.lua's and decide.lua's merged calls
	cluster := e.cluster != nil
	for _, c := range calls {
		var m *int
		switch {
		case cluster:
		case c.script == single:
			m = &merged[0]
		case c.script == window1:
			m = &merged[1]
		case c.script == multi:
			m = &merged[2]
		case c.script == script && c.args[3] == "check":
			m = &merged[3]
		}
		if m == nil {
			ws = append(ws, wire{script: c.script, keys: c.keys, args: c.args, calls: []*call{c}})
			continue
		}
		// The clock must match; the other leading arguments (slack,
		// minimum TTL) are the engine's own.
		if *m < 0 || ws[*m].args[0] != c.args[0] {
			*m = len(ws)
			ws = append(ws, wire{script: c.script, keys: c.keys, args: c.args, calls: []*call{c}})
			continue
		}
		w := &ws[*m]
		if len(w.calls) == 1 { // the first call's slices stay its own
			// Sized as if every call of the pipeline were like the first.
			w.calls = append(make([]*call, 0, len(calls)), w.calls...)
			w.keys = append(make([]string, 0, len(calls)*len(w.keys)), w.keys...)
			first := w.args
			switch c.script {
			case script:
				w.args = make([]any, 0, len(calls)*(len(first)+1))
				w.args = append(w.args, first[:decideArgs-1]...)
				w.args = append(w.args, "checks", 1, len(w.keys))
				w.args = append(w.args, first[decideArgs:]...)
			case multi:
				w.args = first[:3:3]
				w.decisions = make([]any, 0, len(calls)*(len(first)-3))
				w.addMulti(first)
			default:
				// The costs and groups, then the groups' fields: one group, mostly.
				w.args = append(make([]any, 0, flatArgs+2*len(calls)+len(first)-flatArgs), first[:flatArgs]...)
				w.groups = [][]any{first[flatArgs:]}
			}
		}
		w.keys = append(w.keys, c.keys...)
		switch c.script {
		case script:
			w.args[decideArgs] = len(w.calls) + 1
			w.args = append(w.args, len(c.keys))
			w.args = append(w.args, c.args[decideArgs:]...)
		case multi:
			w.addMulti(c.args)
		default:
			w.args = append(w.args, c.args[flatArgs-2], w.group(c.args[flatArgs:]))
		}
		w.calls = append(w.calls, c)
	}
	for i := range ws {
		w := &ws[i]
		switch {
		case w.decisions != nil: // multi.lua's: the groups, then the decisions
			args := make([]any, 0, 3+multiGroup*len(w.groups)+len(w.decisions))
			args = append(args, w.args[0], w.args[1], len(w.groups))
			for _, g := range w.groups {
				args = append(args, g...)
			}
			w.args = append(args, w.decisions...)
		default: // the flat scripts': the groups after the keys' costs and groups
			for _, g := range w.groups {
				w.args = append(w.args, g...)
			}
		}
	}
	return ws
}

// addMulti adds the decision of a multi.lua call's args to w, its groups
// named by their index among w's.
func (w *wire) addMulti(args []any) {
	ng := args[2].(int)
	groups, d := args[3:3+multiGroup*ng], args[3+multiGroup*ng:]
	w.decisions = append(w.decisions, d[0])
	for i := 1; i+1 < len(d); i += 2 {
		g, sign := d[i+1].(int), 1
		if g < 0 {
			g, sign = -g, -1
		}
		w.decisions = append(w.decisions, d[i], sign*w.group(groups[(g-1)*multiGroup:g*multiGroup]))
	}
}

// group returns the index (1-based) of parameter group g in w, adding g
// if it is new.
func (w *wire) group(g []any) int {
	for i, h := range w.groups {
		if slices.Equal(h, g) {
			return i + 1
		}
	}
	w.groups = append(w.groups, g)
	return len(w.groups)
}

// replyLen is the length of c's part of a merged reply.
func replyLen(c *call) int {
	switch c.script {
	case script:
		return 1 + 6*len(c.keys)
	case multi:
		return 1 + flatReply*len(c.keys)
	}
	return flatReply * len(c.keys)
}

// answer ends the calls of w with its reply, each call its part of it.
func (w wire) answer(reply []int64, err error) {
	if len(w.calls) == 1 {
		w.calls[0].reply, w.calls[0].err = reply, err
		w.calls[0].end()
		return
	}
	total := 0
	for _, c := range w.calls {
		total += replyLen(c)
	}
	if err == nil && len(reply) != total {
		err = fmt.Errorf("redisengine: %d values in the reply for %d decisions", len(reply), len(w.calls))
	}
	from := 0
	for _, c := range w.calls {
		to := from + replyLen(c)
		if c.err = err; err == nil {
			c.reply = reply[from:to:to]
		}
		from = to
		c.end()
	}
}
