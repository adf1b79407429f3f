package dataplane

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/checkapi"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/follower"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/rlheaders"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/sluiceclient"
)

// The decision benchmarks: 50 concurrent clients over 10,000 client ids, a
// token bucket, the local Redis, client and server on this machine. They
// report decisions/s and the p50 and p99 of one decision as the client
// sees it.

const benchClients, benchKeys = 50, 10_000

// benchDecider serves a decider on Redis over plain HTTP (HTTP/1.1 and
// unencrypted HTTP/2) and returns its URL and check key.
func benchDecider(b *testing.B) (string, string) { return benchDeciderWith(b, 1_000_000, nil) }

// benchEngine is the Redis engine of the latest benchConfig (benchmarks run
// one at a time), for reportBatch.
var benchEngine *redisengine.Engine

// reportBatch reports the mean decisions per Redis pipeline since p0, c0
// (benchEngine.Pipelines at the start).
func reportBatch(b *testing.B, p0, c0 int64) {
	if p1, c1 := benchEngine.Pipelines(); p1 > p0 {
		b.ReportMetric(float64(c1-c0)/float64(p1-p0), "calls/pipeline")
	}
}

// benchConfig is the decider of the benchmarks, on the local Redis, for a
// token bucket of limitPerSecond per client, publishing to pub (nil: none).
// SLUICE_BENCH_SYNC (a duration) gives the rule that sync interval: local
// counting instead of a Redis call per decision. SLUICE_BENCH_FLUSHERS (a
// number) sets the engine's flushers, SLUICE_BENCH_SPIN (a duration) how long
// its reads poll (none when unset, as a decider), SLUICE_BENCH_NOBATCH (any value)
// turns batching off, and SLUICE_BENCH_HEADERS the rate limit headers answered (as the decider's
// -rate-limit-headers: "none" as envoyproxy/ratelimit's default), for comparisons.
func benchConfig(b *testing.B, limitPerSecond int64, pub *events.Publisher) (decision.Service, string) {
	var sync time.Duration
	if v := os.Getenv("SLUICE_BENCH_SYNC"); v != "" {
		var err error
		if sync, err = time.ParseDuration(v); err != nil {
			b.Fatalf("SLUICE_BENCH_SYNC: %v", err)
		}
	}
	var flushers int
	if v := os.Getenv("SLUICE_BENCH_FLUSHERS"); v != "" {
		var err error
		if flushers, err = strconv.Atoi(v); err != nil {
			b.Fatalf("SLUICE_BENCH_FLUSHERS: %v", err)
		}
	}
	c, prefix := redistest.Client(b)
	_ = c
	// The decider's client (reads that spin, SLUICE_BENCH_SPIN long).
	var spin time.Duration // as a decider's default
	if v := os.Getenv("SLUICE_BENCH_SPIN"); v != "" {
		var err error
		if spin, err = time.ParseDuration(v); err != nil {
			b.Fatalf("SLUICE_BENCH_SPIN: %v", err)
		}
	}
	eng, err := redisengine.Open("redis://"+redistest.Addr(b)+"?pool_size=64", redisengine.ClientOptions{Spin: spin},
		redisengine.Config{Prefix: prefix, Batch: os.Getenv("SLUICE_BENCH_NOBATCH") == "", Flushers: flushers, BreakerFailures: 5, BreakerCooldown: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(eng.Close)
	benchEngine = eng
	if err := eng.Preload(context.Background()); err != nil {
		b.Fatal(err)
	}
	snap := &policy.Snapshot{Tenant: policy.Tenant{ID: "bench", Slug: "bench", Name: "Bench", DefaultTier: "free"}, Version: 1,
		Tiers: []policy.Tier{{Name: "free", Rules: []policy.Rule{{ID: "r", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.TokenBucket, Limit: limitPerSecond, Window: time.Second}, Sync: sync}}}}}
	cfg, err := decide.Compile(snap)
	if err != nil {
		b.Fatal(err)
	}
	keys := follower.NewKeys()
	secret, _ := policy.NewKeySecret(policy.KeyCheck)
	keys.Set(policy.HashKey(secret), cfg)
	apiCfg := decision.Service{Decider: decide.NewDecider(decide.Options{Counters: eng, Local: limit.NewEngine(limit.EngineConfig{}),
		Budget: 50 * time.Millisecond}), Authenticate: keys.Authenticate,
		Events: pub}
	if v := os.Getenv("SLUICE_BENCH_HEADERS"); v != "" {
		if apiCfg.Headers, err = rlheaders.ParseStyle(v); err != nil {
			b.Fatalf("SLUICE_BENCH_HEADERS: %v", err)
		}
	}
	return apiCfg, secret
}

// benchDeciderWith is benchDecider with the rule's limit per second and an
// events publisher.
func benchDeciderWith(b *testing.B, limitPerSecond int64, pub *events.Publisher) (string, string) {
	apiCfg, secret := benchConfig(b, limitPerSecond, pub)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/check", handler(apiCfg))
	mux.Handle(checkapi.NewDecisionService(apiCfg))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := newServer(apiCfg, mux) // as cmd/dataplane serves it
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String(), secret
}

// drive runs b.N decisions from benchClients goroutines with check and
// reports throughput and latency percentiles.
func drive(b *testing.B, check func(client int, id string) error) {
	var next atomic.Int64
	lats := make([][]time.Duration, benchClients)
	var wg sync.WaitGroup
	rc := redis.NewClient(&redis.Options{Addr: redistest.Addr(b)})
	defer rc.Close()
	r0, p0 := serverCPU(b, rc), cputest.ProcessCPU()
	pipes0, calls0 := benchEngine.Pipelines()
	b.ResetTimer()
	start := time.Now()
	for g := range benchClients {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				t := time.Now()
				if err := check(g, fmt.Sprintf("client-%d", i%benchKeys)); err != nil {
					b.Error(err)
					return
				}
				lats[g] = append(lats[g], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	r1, p1 := serverCPU(b, rc), cputest.ProcessCPU()
	all := slices.Concat(lats...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	// What one decision costs: this process's CPU (client and server) and
	// Redis's.
	b.ReportMetric(float64(p1-p0)/float64(time.Microsecond)/float64(len(all)), "process-cpu-µs/op")
	b.ReportMetric(float64(r1-r0)/float64(time.Microsecond)/float64(len(all)), "redis-cpu-µs/op")
	reportBatch(b, pipes0, calls0)
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
}

func BenchmarkDecisionsHTTP(b *testing.B) {
	base, key := benchDecider(b)
	driveHTTP(b, base, key, 200)
}

// BenchmarkDecisionsHTTPEvents measures decisions that are nearly all
// rejected, each rejection published as an event, with Kafka up and with
// Kafka unreachable (the buffer fills, then drops): the latencies should
// match.
func BenchmarkDecisionsHTTPEvents(b *testing.B) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there: connections are refused
	for _, tc := range []struct {
		name    string
		brokers func(b *testing.B) ([]string, string)
	}{
		{"kafka-up", func(b *testing.B) ([]string, string) {
			topic := kafkatest.Topic(b)
			return kafkatest.Start(b, 3, []string{topic}).Addrs(), topic
		}},
		{"kafka-down", func(*testing.B) ([]string, string) { return []string{deadAddr}, "decisions" }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			brokers, topic := tc.brokers(b)
			pub := events.NewPublisher(events.Config{Brokers: brokers, Topic: topic, Decider: "bench",
				Logger: slog.New(slog.DiscardHandler)})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- pub.Run(ctx) }()
			b.Cleanup(func() { cancel(); <-done })
			base, key := benchDeciderWith(b, 1, pub)
			driveHTTP(b, base, key, 429)
			st := pub.Stats()
			b.ReportMetric(float64(st.Dropped)/float64(b.N), "dropped/op")
		})
	}
}

// driveHTTP runs drive over POST /v1/check, expecting status from most
// answers (a client's first check may be allowed).
func driveHTTP(b *testing.B, base, key string, status int) {
	tr := &http.Transport{MaxIdleConnsPerHost: benchClients}
	client := &http.Client{Transport: tr}
	drive(b, func(_ int, id string) error {
		req, _ := http.NewRequest("POST", base+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"`+id+`"}}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != status && resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}

func BenchmarkDecisionsGRPC(b *testing.B) {
	base, key := benchDecider(b)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	client := sluicev1connect.NewDecisionServiceClient(&http.Client{Transport: tr}, base, connect.WithGRPC())
	drive(b, func(_ int, id string) error {
		req := connect.NewRequest(&sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: id}}})
		req.Header().Set("Authorization", "Bearer "+key)
		res, err := client.Check(context.Background(), req)
		if err != nil {
			return err
		}
		if !res.Msg.Allowed {
			return fmt.Errorf("rejected")
		}
		return nil
	})
}

// BenchmarkDecisionsEnvoyRLS: Envoy's rate limit service on grpc-go, one
// descriptor per request, the load of the other decision benchmarks.
func BenchmarkDecisionsEnvoyRLS(b *testing.B) { driveRLS(b, 1) }

// BenchmarkEnvoyRLSThreeDescriptors is BenchmarkDecisionsEnvoyRLS with
// three descriptors per request, as an Envoy route limiting by several
// keys sends: its decisions/s and latencies are of requests, each three
// decisions, which are decided at once.
func BenchmarkEnvoyRLSThreeDescriptors(b *testing.B) { driveRLS(b, 3) }

// driveRLS runs drive over Envoy's ShouldRateLimit with n descriptors per
// request, each a different client.
func driveRLS(b *testing.B, n int) {
	cfg, key := benchConfig(b, 1_000_000, nil)
	client := serveRLS(b, cfg)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	drive(b, func(_ int, id string) error {
		req := &rlsv3.RateLimitRequest{Domain: "bench"}
		for i := range n {
			req.Descriptors = append(req.Descriptors, descriptor("client_id", id+"-"+strconv.Itoa(i)))
		}
		res, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			return err
		}
		if res.OverallCode != rlsv3.RateLimitResponse_OK || len(res.Statuses) != n {
			return fmt.Errorf("answer %v", res)
		}
		return nil
	})
}

// BenchmarkProxyOverhead measures what the reverse proxy adds to a request:
// one client, requests one after another, to an upstream directly and
// through the proxy (decisions on the local Redis, and in process).
func BenchmarkProxyOverhead(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) }))
	b.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	redisCfg, redisKey := benchConfig(b, 1_000_000, nil)
	localCfg, localKey := benchConfig(b, 1_000_000, nil)
	localCfg.Decider = decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: time.Now}, time.Now)
	proxy := func(cfg decision.Service, key string) string {
		srv := httptest.NewServer(proxy.New(proxy.Config{API: cfg, Upstream: u, IdentityHeader: "X-Client-Id",
			Tenant: func() (*decide.Compiled, error) { return cfg.Authenticate("Bearer " + key) }}))
		b.Cleanup(srv.Close)
		return srv.URL
	}
	for _, tc := range []struct{ name, url string }{
		{"direct", up.URL},
		{"proxy-redis", proxy(redisCfg, redisKey)},
		{"proxy-in-process", proxy(localCfg, localKey)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			lats := make([]time.Duration, 0, b.N)
			for i := range b.N {
				req, _ := http.NewRequest("GET", tc.url+"/", nil)
				req.Header.Set("X-Client-Id", "client-"+strconv.Itoa(i%benchKeys))
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lats = append(lats, time.Since(start))
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			slices.Sort(lats)
			b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkDecisionsGRPCGo: DecisionService.Check on grpc-go's own server,
// with a grpc-go client, the load of the other decision benchmarks.
func BenchmarkDecisionsGRPCGo(b *testing.B) {
	cfg, key := benchConfig(b, 1_000_000, nil)
	client := sluicev1.NewDecisionServiceClient(dialGRPC(b, cfg))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	drive(b, func(_ int, id string) error {
		res, err := client.Check(ctx, &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: id}}})
		if err != nil {
			return err
		}
		if !res.Allowed {
			return fmt.Errorf("rejected")
		}
		return nil
	})
}

// BenchmarkDecisionsSDK checks through the Go SDK (Connect over HTTP/1.1),
// one call per Check and with Checks coalesced into CheckBatch calls.
func BenchmarkDecisionsSDK(b *testing.B) {
	for _, coalesce := range []bool{false, true} {
		b.Run(map[bool]string{false: "call-each", true: "coalesced"}[coalesce], func(b *testing.B) {
			base, key := benchDecider(b)
			c := sluiceclient.New(sluiceclient.Config{URL: base, Key: key, Coalesce: coalesce, Timeout: time.Second, DenyCacheSize: -1})
			defer c.Close()
			ctx := context.Background()
			drive(b, func(_ int, id string) error {
				d, err := c.Check(ctx, sluiceclient.Request{Descriptors: map[string]string{"client_id": id}})
				if err != nil {
					return err
				}
				if !d.Allowed {
					return fmt.Errorf("rejected")
				}
				return nil
			})
		})
	}
}
