package dataplane

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/decide"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/redistest"
)

// pipelineCounter counts the pipelines a Redis client sends.
type pipelineCounter struct{ n atomic.Int64 }

func (p *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestCallsOfManyDecisionsShareRoundTrips: a CheckBatch of n checks and an
// Envoy request of n descriptors are decided at once, so the batching Redis
// engine answers them in a few pipelines, not one round trip per decision,
// and each answer stays in its request's place.
func TestCallsOfManyDecisionsShareRoundTrips(t *testing.T) {
	t.Parallel()
	const n = 40
	cfg, secret := testAPI(t)
	c, prefix := redistest.Client(t)
	var pipes pipelineCounter
	c.AddHook(&pipes)
	eng := redisengine.New(c, redisengine.Config{Prefix: prefix, Batch: true})
	t.Cleanup(eng.Close)
	cfg.Decider = decide.NewDecider(decide.Options{Engine: eng, Local: limit.NewEngine(limit.EngineConfig{}), Budget: 5 * time.Second})
	ctx := context.Background()
	if err := eng.Preload(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("CheckBatch", func(t *testing.T) {
		m := &sluicev1.CheckBatchRequest{}
		for i := range n { // client i asks i%5+1 units of a limit of 3: the last two of every five are rejected
			m.Requests = append(m.Requests, &sluicev1.CheckRequest{Cost: int64(i%5 + 1),
				Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: fmt.Sprint("batch-", i)}}})
		}
		before := pipes.n.Load()
		res, err := decisionServer{cfg}.checkBatch(ctx, http.Header{"Authorization": {"Bearer " + secret}}, m)
		if err != nil {
			t.Fatal(err)
		}
		if got := pipes.n.Load() - before; got > n/2 {
			t.Errorf("%d checks took %d pipelines", n, got)
		}
		for i, r := range res.Responses {
			if want := i%5 < 3; r.Allowed != want {
				t.Errorf("check %d (cost %d): allowed %v, want %v", i, i%5+1, r.Allowed, want)
			}
		}
	})

	t.Run("EnvoyRLS", func(t *testing.T) {
		req := &rlsv3.RateLimitRequest{Domain: "acme"}
		for i := range n {
			req.Descriptors = append(req.Descriptors, descriptor("client_id", fmt.Sprint("rls-", i%20)))
		}
		rctx := metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+secret))
		before := pipes.n.Load()
		res, err := NewRLS(cfg).ShouldRateLimit(rctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := pipes.n.Load() - before; got > n/2 {
			t.Errorf("%d descriptors took %d pipelines", n, got)
		}
		// Each of 20 clients asked twice, within a limit of 3: all allowed.
		if res.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("overall %v, want OK", res.OverallCode)
		}
		for i, st := range res.Statuses {
			if st.LimitRemaining != 1 && st.LimitRemaining != 2 {
				t.Errorf("descriptor %d: remaining %d, want 1 or 2", i, st.LimitRemaining)
			}
		}
	})
}
