package dataplane

import (
	"context"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/limit"
)

// BenchmarkShouldRateLimitInProcess is one Envoy request of one descriptor
// through the handler alone, on the in-process engine: no network, no
// Redis. Its allocs/op guards what the decider allocates per decision.
func BenchmarkShouldRateLimitInProcess(b *testing.B) {
	cfg, key := benchConfig(b, 1_000_000, nil)
	cfg.Decider = decide.New(decide.LocalEngine{Engine: limit.NewEngine(limit.EngineConfig{}), Now: time.Now}, time.Now)
	s := NewRLS(cfg)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+key))
	ids := make([]string, benchKeys)
	for i := range ids {
		ids[i] = "client-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		res, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", ids[i%benchKeys])}})
		if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatal(res, err)
		}
	}
}
