package redisengine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
)

// Reset deletes the counters of reqs' keys, drops this engine's local
// views of them, and tells every engine watching resets on the same Redis
// (WatchResets) so that they drop theirs. A key counted locally on some
// decider may keep up to one sync interval of what was admitted before
// the reset: a reconciliation already under way adds it back.
func (e *Engine) Reset(ctx context.Context, reqs []limit.Request) error {
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key
	}
	// One DEL per key: a cluster's keys of one decision may lie in
	// several slots.
	_, err := e.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Del(ctx, e.cfg.Prefix+k)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisengine: reset: %w", err)
	}
	e.local.reset(keys)
	if err := e.client.Publish(ctx, e.resetChannel(), strings.Join(keys, "\n")).Err(); err != nil {
		return fmt.Errorf("redisengine: reset: telling the other deciders: %w", err)
	}
	return nil
}

// resetChannel is the Pub/Sub channel of the engine's resets: one per
// prefix, as the counters are.
func (e *Engine) resetChannel() string { return e.cfg.Prefix + "sluice:resets" }

// WatchResets follows the resets of every engine on the same Redis and
// prefix until ctx ends: each drops this engine's local views of the keys
// and is handed to forget (the decider's Forget, for its deny cache). It
// resubscribes after a connection loss; a reset made meanwhile is missed,
// and what this decider remembers of its keys then lasts until it expires
// (a cached rejection, until its retry-after; a local view, until its next
// reconciliation). ready, if not nil, is closed once subscribed.
func (e *Engine) WatchResets(ctx context.Context, forget func(keys []string), logger *slog.Logger, ready chan<- struct{}) {
	sub := e.client.Subscribe(ctx, e.resetChannel())
	defer sub.Close()
	for {
		if _, err := sub.Receive(ctx); err == nil { // the subscription's confirmation
			break
		} else if ctx.Err() != nil {
			return
		} else {
			logger.WarnContext(ctx, "redisengine: subscribing to resets", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
	if ready != nil {
		close(ready)
	}
	ch := sub.Channel() // go-redis resubscribes by itself after a connection loss
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-ch:
			keys := strings.Split(m.Payload, "\n")
			e.local.reset(keys)
			forget(keys)
		}
	}
}

// reset drops what is counted here of keys: a view, and what was admitted
// on it and not yet sent. The next decision of a key then fetches its
// state again.
func (l *localCounts) reset(keys []string) {
	for _, k := range keys {
		sh := &l.shards[l.shardOf(k)]
		sh.mu.Lock()
		if en, ok := sh.m[k]; ok {
			en.view, en.pending, en.synced = limit.State{}, 0, 0
			en.resets++
		}
		sh.mu.Unlock()
	}
}
