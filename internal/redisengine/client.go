package redisengine

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/internal/spinconn"
)

// LowLatencySpin is a poll for a decider's reads waiting for Redis to set
// when a lone decision's latency matters more than its CPU (package
// spinconn): the shortest that most replies at low load come within
// (docs/benchmarks.md, "Polling reads"). Deciders do not poll by default.
const LowLatencySpin = 200 * time.Microsecond

// ClientOptions are how a decider connects to Redis.
type ClientOptions struct {
	// Cluster takes the URL's host and its addr parameters
	// (redis://h1:6379?addr=h2:6379&addr=h3:6379) as the seed nodes of
	// a Redis Cluster; otherwise the URL is one Redis.
	Cluster bool
	// Sentinel takes the URL's host and its addr parameters as Redis
	// Sentinels, and its master_name parameter as the name of the master
	// they watch (redis://s1:26379?addr=s2:26379&master_name=mymaster):
	// the engine follows the master through failovers.
	Sentinel bool
	// Spin is how long a read waiting for a reply polls before it sleeps;
	// 0 never polls. Through NewClient reads always may; through Open,
	// only while the engine is nearly idle.
	Spin time.Duration
}

// quiet is how many decisions may be waiting on Redis for an Open
// engine's reads to spin: the process is then nearly idle, and a sleeping
// thread's wake-up a large share of a decision's time.
const quiet = 2

// Open connects to Redis at url (NewClient) and returns an Engine on it
// that closes the client when closed. Its reads spin only while at most
// two decisions are waiting on Redis.
func Open(url string, o ClientOptions, cfg Config) (*Engine, error) {
	var (
		eng   atomic.Pointer[Engine]
		stats spinconn.Stats
	)
	client, err := newClient(url, o, &stats, func() bool {
		e := eng.Load()
		return e == nil || e.inRedis.Load() <= quiet
	})
	if err != nil {
		return nil, err
	}
	e := New(client, cfg)
	e.ownClient, e.spins = true, &stats
	eng.Store(e)
	return e, nil
}

// NewClient connects to the Redis, the Redis Cluster or the master
// behind Redis Sentinels at url (a redis://, rediss:// or unix:// URL as
// go-redis parses them), with
// contexts bounding every call so that a decision's time budget holds.
func NewClient(url string, o ClientOptions) (redis.UniversalClient, error) {
	return newClient(url, o, nil, nil)
}

func newClient(url string, o ClientOptions, stats *spinconn.Stats, spinWhen func() bool) (redis.UniversalClient, error) {
	if o.Cluster && o.Sentinel {
		return nil, fmt.Errorf("redis: a URL names a cluster or sentinels, not both")
	}
	dial := func(timeout time.Duration, tlsConfig *tls.Config) func(context.Context, string, string) (net.Conn, error) {
		return dialer(timeout, spinconn.Options{Spin: o.Spin, TLS: tlsConfig, When: spinWhen, Stats: stats})
	}
	if o.Sentinel {
		opts, err := redis.ParseFailoverURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis sentinel URL: %w", redact.Error(err, url))
		}
		if opts.MasterName == "" {
			return nil, fmt.Errorf("redis sentinel URL: no master_name parameter")
		}
		opts.ContextTimeoutEnabled = true
		opts.Dialer = dial(opts.DialTimeout, opts.TLSConfig)
		return redis.NewFailoverClient(opts), nil
	}
	if o.Cluster {
		opts, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis cluster URL: %w", redact.Error(err, url))
		}
		opts.ContextTimeoutEnabled = true
		opts.Dialer = dial(opts.DialTimeout, opts.TLSConfig)
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil { // url.Parse's errors quote the URL, password and all
		return nil, fmt.Errorf("redis URL: %w", redact.Error(err, url))
	}
	opts.ContextTimeoutEnabled = true
	opts.Dialer = dial(opts.DialTimeout, opts.TLSConfig)
	return redis.NewClient(opts), nil
}

// dialer is go-redis's own dialer (its timeout, keep-alives and TLS) on
// connections whose reads spin.
func dialer(timeout time.Duration, o spinconn.Options) func(context.Context, string, string) (net.Conn, error) {
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	d := &net.Dialer{Timeout: timeout, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}}
	return spinconn.Dialer(d, o)
}

// Spins counts the reads of an Open engine that spun and got Redis's
// reply, and those that spun out their time (zeros for an engine made
// with New).
func (e *Engine) Spins() (spins, misses int64) {
	if e.spins == nil {
		return 0, 0
	}
	return e.spins.Spins(), e.spins.Misses()
}
