package dataplane

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/grpcserve"
)

// rawCodec sends a call's request as the bytes it is given.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
func (rawCodec) Name() string { return "proto" }

// A request that is not its call's protobuf is the caller's error,
// InvalidArgument, on every service of the gRPC port, never Internal; a
// well-formed one is still answered.
func TestCorruptProtobufIsInvalidArgument(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	conn := dialGRPC(t, cfg)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	corrupt := []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f} // field 1, bytes, of a length past the end
	for _, method := range []string{"/sluice.v1.DecisionService/Check", "/sluice.v1.DecisionService/CheckBatch",
		"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "/pb.gubernator.V1/GetRateLimits"} {
		var out []byte
		err := conn.Invoke(ctx, method, &corrupt, &out, grpc.ForceCodecV2(rawCodec{}))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s with a corrupt request: %v, want InvalidArgument", method, err)
		}
	}
	if _, err := sluicev1.NewDecisionServiceClient(conn).Check(ctx, &sluicev1.CheckRequest{
		Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "alice"}}}); err != nil {
		t.Fatalf("a well-formed check: %v", err)
	}
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme",
		Descriptors: nil}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an RLS request without descriptors: %v", err)
	}
}

// dialGRPC serves svc's gRPC port, as the decider assembles it, on a
// loopback port and returns a connection to it.
func dialGRPC(t testing.TB, svc decision.Service) *grpc.ClientConn {
	srv := grpcserve.NewServer(svc)
	RegisterGRPC(srv, svc)
	return decisiontest.ServeGRPC(t, srv)
}
