package redisengine

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// call is one decision waiting for a pipeline.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	reply  []int64
	err    error
	done   chan struct{}
}

// ErrClosed is returned for decisions made after Close.
var ErrClosed = errors.New("redisengine: engine closed")

// flushTimeout bounds one pipeline; callers give up earlier, at their own
// deadline, so a slow pipeline holds a flusher, never a decision.
const flushTimeout = 5 * time.Second

// batched queues a call for the flushers and waits for it or for ctx.
func (e *Engine) batched(ctx context.Context, sc *redis.Script, keys []string, args []any) ([]int64, error) {
	c := &call{script: sc, keys: keys, args: args, done: make(chan struct{})}
	select {
	case e.calls <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.stop:
		return nil, ErrClosed
	}
	select {
	case <-c.done:
		return c.reply, c.err
	case <-ctx.Done():
		return nil, ctx.Err() // the flusher finishes it; nobody reads it
	}
}

// flusher sends queued calls as pipelines: it takes the first call, then
// whatever else is queued (waiting up to BatchWait for more), up to
// BatchSize.
func (e *Engine) flusher() {
	batch := make([]*call, 0, e.cfg.BatchSize)
	for {
		batch = batch[:0]
		select {
		case c := <-e.calls:
			batch = append(batch, c)
		case <-e.stop:
			return
		}
		var wait <-chan time.Time
		var timer *time.Timer
		if e.cfg.BatchWait > 0 {
			timer = time.NewTimer(e.cfg.BatchWait)
			wait = timer.C
		}
	collect:
		for len(batch) < e.cfg.BatchSize {
			if wait == nil {
				select {
				case c := <-e.calls:
					batch = append(batch, c)
				default:
					break collect
				}
				continue
			}
			select {
			case c := <-e.calls:
				batch = append(batch, c)
			case <-wait:
				break collect
			}
		}
		if timer != nil {
			timer.Stop()
		}
		e.flush(batch)
	}
}

// flush runs batch as one pipeline of EVALSHA. Pipelines do not fall back
// to EVAL by themselves: on NOSCRIPT (a restarted or flushed Redis) the
// script is loaded and the refused calls are sent once more.
func (e *Engine) flush(batch []*call) {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	pending := batch
	for attempt := 0; attempt < 2 && len(pending) > 0; attempt++ {
		pipe := e.client.Pipeline()
		cmds := make([]*redis.Cmd, len(pending))
		for i, c := range pending {
			cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		var retry []*call
		for i, c := range pending {
			c.reply, c.err = cmds[i].Int64Slice()
			if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") && attempt == 0 {
				retry = append(retry, c)
				continue
			}
			close(c.done)
		}
		if len(retry) > 0 {
			if err := e.Preload(ctx); err != nil {
				for _, c := range retry {
					c.err = err
					close(c.done)
				}
				return
			}
		}
		pending = retry
	}
}
