package dataplane

import (
	"context"
	"net"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// serveRLS serves cfg's RLS on a loopback port and returns a stock grpc-go
// client of it.
func serveRLS(t testing.TB, cfg HTTPConfig) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewRLSServer(cfg)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func TestEnvoyRLSWithAStockClient(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	client := serveRLS(t, cfg)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)

	// Two descriptors: alice's per-client counter, and alice on /login.
	req := &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		descriptor("client_id", "alice"), descriptor("client_id", "bob", "route", "/login")}}
	res, err := client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.OverallCode != rlsv3.RateLimitResponse_OK || len(res.Statuses) != 2 {
		t.Fatalf("first call: %v", res)
	}
	st := res.Statuses[1] // bob on /login: the login rule (2/min) is the most restrictive
	if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetName() != "login" || st.CurrentLimit.GetRequestsPerUnit() != 2 ||
		st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.LimitRemaining != 1 {
		t.Fatalf("login status %v", st)
	}
	if got := res.Statuses[0]; got.CurrentLimit.GetName() != "per-client" || got.LimitRemaining != 2 || got.DurationUntilReset.AsDuration() != 45*time.Second {
		t.Fatalf("per-client status %v", got)
	}

	// hits_addend is the cost: bob's second and third /login at once exceed 2.
	req = &rlsv3.RateLimitRequest{Domain: "acme", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "bob", "route", "/login")}}
	res, err = client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || res.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT || res.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("over the limit: %v", res)
	}
	headers := map[string]string{}
	for _, h := range res.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	if headers["X-Ratelimit-Limit"] != "2" || headers["X-Ratelimit-Remaining"] != "1" || headers["Retry-After"] == "" || headers["Ratelimit-Policy"] == "" {
		t.Fatalf("headers %v: want the login rule's", headers)
	}

	// A descriptor's own hits_addend wins over the request's.
	d := descriptor("client_id", "carol")
	d.HitsAddend = wrapperspb.UInt64(3)
	res, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil || res.Statuses[0].LimitRemaining != 0 || res.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("per-descriptor hits: %v %v", res, err)
	}
}

func TestEnvoyRLSRefusesWrongCallers(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	client := serveRLS(t, cfg)
	ok := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	for name, tc := range map[string]struct {
		ctx  context.Context
		req  *rlsv3.RateLimitRequest
		want codes.Code
	}{
		"no key":         {context.Background(), &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "a")}}, codes.Unauthenticated},
		"wrong key":      {metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer sk_check_nope"), &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "a")}}, codes.Unauthenticated},
		"other domain":   {ok, &rlsv3.RateLimitRequest{Domain: "globex", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "a")}}, codes.PermissionDenied},
		"no descriptors": {ok, &rlsv3.RateLimitRequest{Domain: "acme"}, codes.InvalidArgument},
	} {
		if _, err := client.ShouldRateLimit(tc.ctx, tc.req); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}
