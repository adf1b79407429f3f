package redisengine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Evicting lists the Redis nodes (masters) that may evict keys, counters
// among them, when full: a maxmemory with a policy other than noeviction
// (every key of the engine has an expiry, so the volatile-* policies evict
// them too). An evicted counter starts afresh, and its client is admitted
// beyond its limit without an error to show it; with noeviction a full
// Redis refuses writes instead, and decisions follow their failure modes.
// Each is "address: policy". A Redis that refuses CONFIG (some managed
// ones) gives an error.
func (e *Engine) Evicting(ctx context.Context) ([]string, error) {
	var (
		mu  sync.Mutex
		out []string
	)
	check := func(ctx context.Context, c *redis.Client) error {
		cfg, err := c.ConfigGet(ctx, "maxmemory*").Result()
		if err != nil {
			return err
		}
		if policy := cfg["maxmemory-policy"]; cfg["maxmemory"] != "0" && policy != "noeviction" {
			mu.Lock()
			out = append(out, c.Options().Addr+": "+policy)
			mu.Unlock()
		}
		return nil
	}
	var err error
	if e.cluster != nil {
		err = e.cluster.ForEachMaster(ctx, check)
	} else if c, ok := e.client.(*redis.Client); ok {
		err = check(ctx, c)
	} else {
		return nil, nil // a client of its own kind: no node to ask
	}
	if err != nil {
		return nil, fmt.Errorf("redisengine: read the memory policy: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// WatchEviction checks Evicting now and every interval until ctx ends,
// keeping what it found for EvictingNodes (a metric) and logging a warning
// whenever the nodes that may evict change to some. A Redis that refuses
// CONFIG leaves the count at 0 and says nothing.
func (e *Engine) WatchEviction(ctx context.Context, every time.Duration, logger *slog.Logger) {
	var last string
	for {
		if nodes, err := e.Evicting(ctx); err == nil {
			e.evicting.Store(int64(len(nodes)))
			if now := strings.Join(nodes, ", "); now != last {
				if now != "" {
					logger.WarnContext(ctx, "redis may evict counters when full, admitting their clients afresh; set maxmemory-policy noeviction",
						"nodes", nodes)
				}
				last = now
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// EvictingNodes is how many nodes WatchEviction last found may evict.
func (e *Engine) EvictingNodes() int64 { return e.evicting.Load() }
