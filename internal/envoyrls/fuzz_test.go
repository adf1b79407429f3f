package envoyrls_test

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/envoyrls"
)

// FuzzShouldRateLimit sends Envoy's rate limit service arbitrary requests,
// decoded from arbitrary bytes as grpc-go would: every answer is a
// decision with a status per descriptor, or a refusal of the input
// (InvalidArgument, PermissionDenied for another domain), never an
// internal error.
func FuzzShouldRateLimit(f *testing.F) {
	for _, seed := range []*rlsv3.RateLimitRequest{
		{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "alice")}},
		{Domain: "acme", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "a", "route", "/login"), descriptor("client_id", "b")}},
		{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: descriptor("client_id", "a").Entries, HitsAddend: wrapperspb.UInt64(1 << 40)}}},
		{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: descriptor("client_id", "a").Entries, HitsAddend: wrapperspb.UInt64(0)}}},
		{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: descriptor("client_id", "a", "client_id", "b").Entries,
			Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR, UnitMultiplier: wrapperspb.UInt32(3)}}}},
		{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: descriptor("client_id", "a").Entries,
			Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1 << 31, Unit: 99, UnitMultiplier: wrapperspb.UInt32(1 << 31)}}}},
		{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("", "x")}},
		{Domain: "acme"},
		{Domain: "other", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "a")}},
	} {
		b, err := proto.Marshal(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	cfg, secret := testAPI(f)
	s := envoyrls.NewRLS(cfg)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+secret))
	f.Fuzz(func(t *testing.T, b []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(b, &req) != nil {
			return // grpc-go refuses it before the handler
		}
		res, err := s.ShouldRateLimit(ctx, &req)
		switch status.Code(err) {
		case codes.OK:
			if len(res.Statuses) != len(req.Descriptors) {
				t.Fatalf("%v: %d statuses for %d descriptors", &req, len(res.Statuses), len(req.Descriptors))
			}
		case codes.InvalidArgument, codes.PermissionDenied:
		default:
			t.Fatalf("%v: %v", &req, err)
		}
	})
}
