package redisengine

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/tlstest"
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
	c, err := NewClient("redis://"+redistest.Addr(t), ClientOptions{Spin: LowLatencySpin})
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
	e, err := Open("redis://"+redistest.Addr(t), ClientOptions{Spin: LowLatencySpin}, Config{Prefix: prefix, Batch: true})
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
	if e.inRedis.Load() != 0 {
		t.Fatalf("%d calls still counted as waiting", e.inRedis.Load())
	}
	// One decision at a time: the first read took the spinner, whether
	// its reply came in time or not.
	if spins, misses := e.Spins(); spins+misses < 1 {
		t.Fatalf("spins %d, misses %d: no read spun", spins, misses)
	}
	e.Close()
	if err := e.client.(redis.UniversalClient).Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("the engine's client after Close: %v, want closed", err)
	}
	if _, err := Open("http://x", ClientOptions{}, Config{}); err == nil {
		t.Fatal("Open of an http URL succeeded")
	}
}

// The decider's URLs beyond redis://: rediss:// (TLS, through the
// spinning dialer's own handshake) and unix:// sockets decide alike.
func TestOpenOverTLSAndUnixSocket(t *testing.T) {
	dir := t.TempDir()
	cert, key, _ := tlstest.NewCA(t).ServerFiles(t, dir, 1)
	tlsPort := redistest.FreePort(t)
	sock := filepath.Join(dir, "redis.sock")
	redistest.StartServer(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-auth-clients", "no", "--unixsocket", sock, "--unixsocketperm", "700")
	lim := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Hour})
	for _, url := range []string{
		"rediss://127.0.0.1:" + strconv.Itoa(tlsPort) + "?skip_verify=true",
		"unix://" + sock,
	} {
		e, err := Open(url, ClientOptions{Spin: LowLatencySpin}, Config{Prefix: redistest.Prefix(t), Batch: true})
		if err != nil {
			t.Fatal(err)
		}
		res := make([]limit.Result, 1)
		var got []bool
		for range 3 {
			ok, err := e.AllowAll(context.Background(), []limit.Request{{Key: "{c}r", Limiter: lim, Cost: 1}}, res)
			if err != nil {
				t.Fatalf("%s: %v", url, err)
			}
			got = append(got, ok)
		}
		e.Close()
		if !slices.Equal(got, []bool{true, true, false}) {
			t.Fatalf("%s: decisions %v, want allowed, allowed, rejected", url, got)
		}
	}
}

// Through Sentinel the engine decides on the master, and on the replica
// Sentinel promotes when the master dies: decisions fail while there is no
// master (the decider's failure modes answer then), and succeed again on
// the new one without a restart.
func TestOpenThroughSentinelFollowsAFailover(t *testing.T) {
	t.Parallel()
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	sentinel := redistest.StartSentinel(t, "sluice", master)
	prefix := redistest.Prefix(t)
	e, err := Open("redis://"+sentinel.Addr+"?master_name=sluice", ClientOptions{Sentinel: true, Spin: LowLatencySpin},
		Config{Prefix: prefix, Batch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	lim := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 1_000_000, Window: time.Hour})
	decide := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := e.AllowAll(ctx, []limit.Request{{Key: "{c}r", Limiter: lim, Cost: 1}}, make([]limit.Result, 1))
		return err
	}
	if err := decide(); err != nil {
		t.Fatalf("through Sentinel: %v", err)
	}
	master.Stop(t)
	deadline := time.Now().Add(30 * time.Second)
	for decide() != nil {
		if time.Now().After(deadline) {
			t.Fatal("no decision succeeded after the failover")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Decided on the promoted replica.
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	if role, err := rc.Do(context.Background(), "ROLE").Slice(); err != nil || role[0] != "master" {
		t.Fatalf("the replica's role after the failover: %v %v", role, err)
	}
	if n, err := rc.Exists(context.Background(), prefix+"{c}r").Result(); err != nil || n != 1 {
		t.Fatalf("the counter on the promoted replica: %d %v", n, err)
	}
	if _, err := NewClient("redis://"+sentinel.Addr, ClientOptions{Sentinel: true}); err == nil || !strings.Contains(err.Error(), "master_name") {
		t.Fatalf("a sentinel URL without master_name: %v", err)
	}
	if _, err := NewClient("redis://"+sentinel.Addr+"?master_name=x", ClientOptions{Sentinel: true, Cluster: true}); err == nil {
		t.Fatal("cluster and sentinel at once were accepted")
	}
}

// Evicting names the nodes that would drop counters when full: a memory
// limit with an evicting policy, volatile ones included (every counter has
// an expiry); noeviction, or no limit, is safe.
func TestEvicting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl")
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	e := New(rc, Config{Prefix: redistest.Prefix(t)})
	for _, step := range []struct {
		param, value string
		want         []string
	}{
		{"", "", []string{srv.Addr + ": volatile-ttl"}},
		{"maxmemory-policy", "allkeys-lru", []string{srv.Addr + ": allkeys-lru"}},
		{"maxmemory-policy", "noeviction", nil},
		{"maxmemory-policy", "allkeys-lfu", []string{srv.Addr + ": allkeys-lfu"}},
		{"maxmemory", "0", nil},
	} {
		if step.param != "" {
			if err := rc.ConfigSet(ctx, step.param, step.value).Err(); err != nil {
				t.Fatal(err)
			}
		}
		got, err := e.Evicting(ctx)
		if err != nil || !slices.Equal(got, step.want) {
			t.Fatalf("after %s %s: %q, %v; want %q", step.param, step.value, got, err, step.want)
		}
	}

	// The watcher keeps the count for the metric, and follows changes.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go e.WatchEviction(wctx, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	for _, step := range []struct {
		maxmemory string
		want      int64
	}{{"64mb", 1}, {"0", 0}} {
		if err := rc.ConfigSet(ctx, "maxmemory", step.maxmemory).Err(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); e.EvictingNodes() != step.want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("maxmemory %s: EvictingNodes %d, want %d", step.maxmemory, e.EvictingNodes(), step.want)
			}
		}
	}
}
