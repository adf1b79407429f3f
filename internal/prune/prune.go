// Package prune runs a retention job: deleting what has grown older than
// its retention, at start and then periodically, until stopped.
package prune

import (
	"context"
	"log/slog"
	"time"
)

// Job deletes what is older than before and says how many rows went.
type Job func(ctx context.Context, before time.Time) (int64, error)

// Loop runs job for what is older than retention at start and every
// interval after, until ctx ends. Failures are logged and retried at the
// next tick; what ran is logged with what, such as "old rollups".
func Loop(ctx context.Context, job Job, retention, every time.Duration, now func() time.Time, logger *slog.Logger, what string) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := job(ctx, now().Add(-retention)); err != nil && ctx.Err() == nil {
			logger.WarnContext(ctx, "pruning "+what+" failed", "err", err)
		} else if n > 0 {
			logger.InfoContext(ctx, "pruned "+what, "rows", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
