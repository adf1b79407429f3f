package redisengine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redistest"
)

// NewClient makes a node's or a cluster's client from a URL, and names
// what is wrong with a URL it cannot use.
func TestNewClient(t *testing.T) {
	for _, tc := range []struct {
		url     string
		cluster bool
		err     string
	}{
		{"http://127.0.0.1:6379", false, "redis URL"},
		{"redis://127.0.0.1:6379?addr=127.0.0.1:6380", false, "redis URL"}, // seeds, but not told it is a cluster
		{"ftp://127.0.0.1:7000", true, "redis cluster URL"},
	} {
		if _, err := NewClient(tc.url, ClientOptions{Cluster: tc.cluster}); err == nil || !strings.HasPrefix(err.Error(), tc.err) {
			t.Errorf("NewClient(%q, cluster %v): %v, want an error starting %q", tc.url, tc.cluster, err, tc.err)
		}
	}
	c, err := NewClient("redis://"+redistest.Addr(t), ClientOptions{Spin: DefaultSpin})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*redis.Client); !ok {
		t.Fatalf("a node's URL gave a %T", c)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	cc, err := NewClient("redis://127.0.0.1:7000?addr=127.0.0.1:7001", ClientOptions{Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if cl, ok := cc.(*redis.ClusterClient); !ok || !slices.Equal(cl.Options().Addrs, []string{"127.0.0.1:7000", "127.0.0.1:7001"}) {
		t.Fatalf("a cluster URL gave %T with seeds %v", cc, cc.(*redis.ClusterClient).Options().Addrs)
	}
}

// Open's engine decides through its own client, and closing the engine
// closes that client.
func TestOpen(t *testing.T) {
	_, prefix := redistest.Client(t)
	e, err := Open("redis://"+redistest.Addr(t), ClientOptions{Spin: DefaultSpin}, Config{Prefix: prefix, Batch: true})
	if err != nil {
		t.Fatal(err)
	}
	lim := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Hour})
	res := make([]limit.Result, 1)
	for i, want := range []bool{true, false} {
		ok, err := e.AllowAll(context.Background(), []limit.Request{{Key: "{open}r", Limiter: lim, Cost: 1}}, res)
		if err != nil || ok != want {
			t.Fatalf("decision %d: %v, %v; want %v", i+1, ok, err, want)
		}
	}
	if e.waiting.Load() != 0 {
		t.Fatalf("%d calls still counted as waiting", e.waiting.Load())
	}
	e.Close()
	if err := e.client.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("the engine's client after Close: %v, want closed", err)
	}
	if _, err := Open("http://x", ClientOptions{}, Config{}); err == nil {
		t.Fatal("Open of an http URL succeeded")
	}
}
