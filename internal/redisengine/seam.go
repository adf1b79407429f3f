package redisengine

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Client is what the engine asks of Redis: its scripts, pipelines, the
// reset channel's publish and subscribe, and closing. A *redis.Client (a
// single node, or Sentinel's failover client) is one, and so is a
// *redis.ClusterClient, which is a Cluster too.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	Close() error
}

// Cluster is a Client of a Redis Cluster: the masters, which master holds
// a key, and reading the cluster's slots again.
type Cluster interface {
	Client
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ReloadState(ctx context.Context)
}

var (
	_ Client  = (*redis.Client)(nil)
	_ Cluster = (*redis.ClusterClient)(nil)
)
