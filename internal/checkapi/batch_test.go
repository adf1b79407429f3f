package checkapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/envoyrls"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// TestCallsOfManyDecisions: a CheckBatch of n checks and an Envoy request
// of n descriptors are decided at once, so the batching Redis engine
// answers them in a few pipelines, not one round trip per decision, and
// each answer stays in its request's place; such a call with one invalid
// decision is refused whole, before anything is counted.
func TestCallsOfManyDecisions(t *testing.T) {
	t.Parallel()
	const n = 40
	cfg, secret := testAPI(t)
	c, prefix := redistest.Client(t)
	pipes := &redistest.Pipelines{Command: "evalsha"}
	c.AddHook(pipes)
	eng := redisengine.New(c, redisengine.Config{Prefix: prefix, Batch: true})
	t.Cleanup(eng.Close)
	cfg.Decider = decide.NewDecider(decide.Options{Counters: eng, Local: limit.NewEngine(limit.EngineConfig{}), Budget: 5 * time.Second})
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
		before := pipes.Count()
		res, err := decisionServer{cfg}.checkBatch(ctx, "Bearer "+secret, m)
		if err != nil {
			t.Fatal(err)
		}
		if got := pipes.Count() - before; got != 1 {
			t.Errorf("%d checks took %d pipelines, want 1", n, got)
		}
		for i, r := range res.Responses {
			if want := i%5 < 3; r.Allowed != want {
				t.Errorf("check %d (cost %d): allowed %v, want %v", i, i%5+1, r.Allowed, want)
			}
		}
	})

	t.Run("DenyCachedCheckDoesNotHoldItsCall", func(t *testing.T) {
		dcfg := cfg
		dcfg.Decider = decide.NewDecider(decide.Options{Counters: eng, Local: limit.NewEngine(limit.EngineConfig{}), Budget: 5 * time.Second, DenyCacheSize: 100})
		check := func(ctx context.Context, ids ...string) []bool {
			t.Helper()
			m := &sluicev1.CheckBatchRequest{}
			for _, id := range ids {
				m.Requests = append(m.Requests, &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: id}}})
			}
			res, err := decisionServer{dcfg}.checkBatch(ctx, "Bearer "+secret, m)
			if err != nil {
				t.Fatal(err)
			}
			var allowed []bool
			for _, r := range res.Responses {
				allowed = append(allowed, r.Allowed)
			}
			return allowed
		}
		for range 4 { // a limit of 3: the fourth is rejected, and remembered
			check(ctx, "denied")
		}
		// The cached rejection is answered at once, the other by Redis.
		bctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if got := check(bctx, "denied", "fresh"); !slices.Equal(got, []bool{false, true}) {
			t.Errorf("allowed %v, want [false true]", got)
		}
	})

	t.Run("CheckBatchRefusedWhole", func(t *testing.T) {
		// One good check and two bad: refused whole, the bad fields named
		// by index, and nothing counted: the good client still has all 3.
		m := &sluicev1.CheckBatchRequest{Requests: []*sluicev1.CheckRequest{
			{Cost: 3, Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "whole"}}},
			{Cost: -1, Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "whole"}}},
			{Tier: "gold", Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "whole"}}},
		}}
		_, err := decisionServer{cfg}.checkBatch(ctx, "Bearer "+secret, m)
		if got := fieldsOf(t, err); !slices.Equal(got, []string{"requests[1].cost", "requests[2].tier"}) {
			t.Fatalf("refused fields %v, want requests[1].cost and requests[2].tier", got)
		}
		res, err := decisionServer{cfg}.checkBatch(ctx, "Bearer "+secret, &sluicev1.CheckBatchRequest{Requests: m.Requests[:1]})
		if err != nil || !res.Responses[0].Allowed {
			t.Fatalf("the good check alone: %v %v, want allowed", res, err)
		}
	})

	t.Run("EnvoyRLSRefusedWhole", func(t *testing.T) {
		req := &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			descriptor("client_id", "rls-whole"), descriptor("", "no key")}}
		rctx := metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+secret))
		_, err := envoyrls.NewRLS(cfg).ShouldRateLimit(rctx, req)
		if code, fields := grpcFields(err); code != codes.InvalidArgument || !slices.Equal(fields, []string{"descriptors[1].descriptors[0].key"}) {
			t.Fatalf("a descriptor without a key: %v, fields %v", err, fields)
		}
		req.Descriptors = req.Descriptors[:1]
		req.HitsAddend = 3
		if res, err := envoyrls.NewRLS(cfg).ShouldRateLimit(rctx, req); err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("the good descriptor alone, 3 hits: %v %v, want OK", res, err)
		}
	})

	t.Run("EnvoyRLS", func(t *testing.T) {
		req := &rlsv3.RateLimitRequest{Domain: "acme"}
		for i := range n {
			req.Descriptors = append(req.Descriptors, descriptor("client_id", fmt.Sprint("rls-", i%20)))
		}
		rctx := metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+secret))
		before := pipes.Count()
		res, err := envoyrls.NewRLS(cfg).ShouldRateLimit(rctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := pipes.Count() - before; got != 1 {
			t.Errorf("%d descriptors took %d pipelines, want 1", n, got)
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

// fieldsOf is the fields a Connect InvalidArgument error names.
func fieldsOf(t *testing.T, err error) []string {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Fatalf("error %v, want InvalidArgument", err)
	}
	var fields []string
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Fatal(err)
		}
		if br, ok := v.(*errdetails.BadRequest); ok {
			for _, f := range br.FieldViolations {
				fields = append(fields, f.Field)
			}
		}
	}
	return fields
}
