// Package gubernator_test drives a decider with gubernator's own Go
// client (github.com/gubernator-io/gubernator/v2), over a connection that
// carries the tenant's check key, through the behaviours gubernator's
// functional tests define.
package gubernator_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	"github.com/sluicehq/sluice/internal/gubernator"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// bearer sends the tenant's check key with every call, as gubernator's
// users add it: grpc.WithPerRPCCredentials on their own connection,
// handed to guber.NewV1Client (DialV1Server takes no dial options).
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// clock is a decider's clock the test moves.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func newClock(t time.Time) *clock        { c := &clock{}; c.ns.Store(t.UnixNano()); return c }
func (c *clock) set(t time.Time)         { c.ns.Store(t.UnixNano()) }

var _ = (*clock).set

// serve runs a decider's gubernator V1 on Redis at the clock and returns
// gubernator's client of it, with the key, and without.
func serve(t *testing.T, c *clock) (withKey, without guber.V1Client) {
	t.Helper()
	cfg, key := decisiontest.Default(t)
	rc, prefix := redistest.Client(t)
	cfg.Decider = decide.NewDecider(decide.Options{Counters: redisengine.New(rc, redisengine.Config{Prefix: prefix, Batch: true, Now: c.now}),
		DenyCacheSize: 1024, Budget: time.Second, Now: c.now})
	srv := grpc.NewServer()
	gubernator.Register(srv, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	dial := func(opts ...grpc.DialOption) guber.V1Client {
		conn, err := grpc.NewClient(ln.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return guber.NewV1Client(conn)
	}
	return dial(grpc.WithPerRPCCredentials(bearer(key))), dial()
}

// hit is one request of gubernator's functional tests, and the answer
// they expect.
type hit struct {
	name      string
	hits      int64
	behavior  guber.Behavior
	status    guber.Status
	remaining int64
	then      time.Duration // the clock moves on after the request
	removed   bool          // RESET_REMAINING: the bucket removed, no reset time
	differs   string        // why Sluice answers otherwise than gubernator
}

func run(t *testing.T, client guber.V1Client, c *clock, req *guber.RateLimitReq, hits []hit) {
	t.Helper()
	for _, h := range hits {
		r := proto.Clone(req).(*guber.RateLimitReq)
		r.Hits, r.Behavior = h.hits, req.Behavior|h.behavior
		res, err := client.GetRateLimits(context.Background(), &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{r}})
		if err != nil || len(res.Responses) != 1 {
			t.Fatalf("%s: %v %v", h.name, res, err)
		}
		got := res.Responses[0]
		if h.differs != "" {
			t.Logf("%s: Sluice differs: %s", h.name, h.differs)
		}
		if got.Error != "" || got.Status != h.status || got.Remaining != h.remaining || got.Limit != req.Limit || (got.ResetTime == 0) != h.removed {
			t.Errorf("%s: %v, want %v with %d remaining of %d and a reset time", h.name, got, h.status, h.remaining, req.Limit)
		}
		c.advance(h.then)
	}
}

var start = time.Date(2026, 11, 22, 10, 0, 15, 0, time.UTC)

func TestGubernatorClientWithAKey(t *testing.T) {
	t.Parallel()
	c := newClock(start)
	client, anonymous := serve(t, c)
	req := &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{Name: "n", UniqueKey: "k", Hits: 1, Limit: 1, Duration: guber.Second}}}
	if _, err := anonymous.GetRateLimits(context.Background(), req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without a key: %v, want Unauthenticated", err)
	}
	if res, err := client.HealthCheck(context.Background(), &guber.HealthCheckReq{}); err != nil || res.Status != guber.Healthy {
		t.Fatalf("HealthCheck: %v %v", res, err)
	}

	t.Run("TestOverTheLimit", func(t *testing.T) {
		run(t, client, c, &guber.RateLimitReq{Name: "test_over_limit", UniqueKey: "account:1234", Algorithm: guber.Algorithm_TOKEN_BUCKET,
			Duration: guber.Second * 9, Limit: 2}, []hit{
			{name: "first", hits: 1, status: guber.Status_UNDER_LIMIT, remaining: 1},
			{name: "second", hits: 1, status: guber.Status_UNDER_LIMIT, remaining: 0},
			{name: "over", hits: 1, status: guber.Status_OVER_LIMIT, remaining: 0},
		})
	})
	t.Run("TestTokenBucketRequestMoreThanAvailable", func(t *testing.T) {
		run(t, client, c, &guber.RateLimitReq{Name: "test_token_more_than_available", UniqueKey: "account:123456", Algorithm: guber.Algorithm_TOKEN_BUCKET,
			Duration: guber.Millisecond * 1000, Limit: 2000}, []hit{
			{name: "half the bucket", hits: 1000, status: guber.Status_UNDER_LIMIT, remaining: 1000},
			{name: "more than is left", hits: 1500, status: guber.Status_OVER_LIMIT, remaining: 1000},
			{name: "500", hits: 500, status: guber.Status_UNDER_LIMIT, remaining: 500},
			{name: "400", hits: 400, status: guber.Status_UNDER_LIMIT, remaining: 100},
			{name: "100", hits: 100, status: guber.Status_UNDER_LIMIT, remaining: 0},
			{name: "1 over", hits: 1, status: guber.Status_OVER_LIMIT, remaining: 0},
		})
	})
	for _, alg := range []guber.Algorithm{guber.Algorithm_TOKEN_BUCKET, guber.Algorithm_LEAKY_BUCKET} {
		t.Run("TestDrainOverLimit/"+alg.String(), func(t *testing.T) {
			run(t, client, c, &guber.RateLimitReq{Name: "test_drain_over_limit", UniqueKey: "account:1234:" + alg.String(), Algorithm: alg,
				Behavior: guber.Behavior_DRAIN_OVER_LIMIT, Duration: guber.Second * 30, Limit: 10}, []hit{
				{name: "check remaining before hit", hits: 0, status: guber.Status_UNDER_LIMIT, remaining: 10},
				{name: "first hit", hits: 1, status: guber.Status_UNDER_LIMIT, remaining: 9},
				{name: "over limit hit", hits: 100, status: guber.Status_OVER_LIMIT, remaining: 0},
				{name: "check remaining", hits: 0, status: guber.Status_OVER_LIMIT, remaining: 0,
					differs: "a look (hits 0) at a bucket with nothing left answers OVER_LIMIT; gubernator answers the status its last hit at a remaining of 0 left, UNDER_LIMIT after a drain"},
			})
		})
	}
	t.Run("TestResetRemaining", func(t *testing.T) {
		run(t, client, c, &guber.RateLimitReq{Name: "test_reset_remaining", UniqueKey: "account:1234", Algorithm: guber.Algorithm_TOKEN_BUCKET,
			Duration: guber.Millisecond * 9000, Limit: 100}, []hit{
			{name: "subtract 1", hits: 1, behavior: guber.Behavior_BATCHING, status: guber.Status_UNDER_LIMIT, remaining: 99},
			{name: "subtract 2", hits: 1, behavior: guber.Behavior_BATCHING, status: guber.Status_UNDER_LIMIT, remaining: 98},
			{name: "reset", hits: 1, behavior: guber.Behavior_RESET_REMAINING, status: guber.Status_UNDER_LIMIT, remaining: 100, removed: true},
			{name: "subtract 1 after reset", hits: 1, behavior: guber.Behavior_BATCHING, status: guber.Status_UNDER_LIMIT, remaining: 99},
		})
	})
	t.Run("TestTokenBucketGregorian", func(t *testing.T) {
		run(t, client, c, &guber.RateLimitReq{Name: "test_token_bucket_greg", UniqueKey: "account:12345", Behavior: guber.Behavior_DURATION_IS_GREGORIAN,
			Algorithm: guber.Algorithm_TOKEN_BUCKET, Duration: guber.GregorianMinutes, Limit: 60}, []hit{
			{name: "first hit", hits: 1, status: guber.Status_UNDER_LIMIT, remaining: 59},
			{name: "second hit", hits: 1, status: guber.Status_UNDER_LIMIT, remaining: 58},
			{name: "consume remaining hits", hits: 58, status: guber.Status_UNDER_LIMIT, remaining: 0},
			{name: "should be over the limit", hits: 1, status: guber.Status_OVER_LIMIT, remaining: 0, then: 61 * time.Second},
			{name: "should be under the limit", hits: 0, status: guber.Status_UNDER_LIMIT, remaining: 60},
		})
	})
	t.Run("batches", func(t *testing.T) {
		// Several requests in one call, each decided on its own, one that
		// cannot be decided saying why beside the others' answers.
		res, err := client.GetRateLimits(context.Background(), &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{
			{Name: "batch", UniqueKey: "a", Hits: 1, Limit: 5, Duration: guber.Minute},
			{Name: "batch", UniqueKey: "b", Hits: 2, Limit: 5, Duration: guber.Minute, Algorithm: guber.Algorithm_LEAKY_BUCKET},
			{Name: "batch", UniqueKey: "c", Hits: 1, Limit: 5},
		}})
		if err != nil || len(res.Responses) != 3 {
			t.Fatalf("%v %v", res, err)
		}
		if a, b, bad := res.Responses[0], res.Responses[1], res.Responses[2]; a.Remaining != 4 || b.Remaining != 3 || a.Error != "" || b.Error != "" || bad.Error == "" {
			t.Fatalf("batch answers %v", res.Responses)
		}
	})
}
