package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Pipelines counts the pipelines a client sends whose first command is
// Command (go-redis also pipelines a new connection's CLIENT SETINFO, which
// a test of batching does not want to count). Add it with client.AddHook.
type Pipelines struct {
	Command string
	n       atomic.Int64
}

// Count is the pipelines counted so far.
func (p *Pipelines) Count() int64 { return p.n.Load() }

// DialHook implements redis.Hook.
func (p *Pipelines) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (p *Pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (p *Pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == p.Command {
			p.n.Add(1)
		}
		return next(ctx, cmds)
	}
}
