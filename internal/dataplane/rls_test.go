package dataplane

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

// serveRLS serves cfg's grpc-go server on a loopback port and returns a
// stock grpc-go client of its rate limit service.
func serveRLS(t testing.TB, cfg HTTPConfig) rlsv3.RateLimitServiceClient {
	return rlsv3.NewRateLimitServiceClient(serveGRPC(t, cfg))
}

// serveGRPC serves cfg's grpc-go server on a loopback port and returns a
// connection to it.
func serveGRPC(t testing.TB, cfg HTTPConfig) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(listenGRPC(t, cfg), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// listenGRPC serves cfg's grpc-go server on a loopback port and returns
// its address.
func listenGRPC(t testing.TB, cfg HTTPConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewGRPCServer(cfg)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
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

	// A descriptor's hits_addend of 0 asks without consuming: over the
	// limit for carol, who has none left; dave's peeks leave his 3 for the
	// request after them.
	d.HitsAddend = wrapperspb.UInt64(0)
	res, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || res.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("carol's peek: %v %v", res, err)
	}
	peek := descriptor("client_id", "dave")
	peek.HitsAddend = wrapperspb.UInt64(0)
	for range 2 {
		res, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{peek}})
		if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK || res.Statuses[0].LimitRemaining != 3 {
			t.Fatalf("peek: %v %v", res, err)
		}
	}
	res, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "dave")}})
	if err != nil || res.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("dave's first request after peeks: %v %v", res, err)
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

// DecisionService on grpc-go, with a stock client: decisions, and errors
// with the same codes and field details as over Connect.
func TestDecisionServiceOnGRPCGo(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	client := sluicev1.NewDecisionServiceClient(serveGRPC(t, cfg))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	req := &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "gina"}}}
	for i := range 4 {
		res, err := client.Check(ctx, req)
		if err != nil || res.Allowed != (i < 3) || res.Rules[0].RuleName != "per-client" {
			t.Fatalf("check %d: %v %v", i, res, err)
		}
	}
	batch, err := client.CheckBatch(ctx, &sluicev1.CheckBatchRequest{Requests: []*sluicev1.CheckRequest{req, {Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "hal"}}}}})
	if err != nil || len(batch.Responses) != 2 || batch.Responses[0].Allowed || !batch.Responses[1].Allowed {
		t.Fatalf("batch %v %v", batch, err)
	}
	_, err = client.Check(ctx, &sluicev1.CheckRequest{Tier: "platinum"})
	st := status.Convert(err)
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, f := range br.FieldViolations {
				fields = append(fields, f.Field)
			}
		}
	}
	if st.Code() != codes.InvalidArgument || len(fields) != 1 || fields[0] != "tier" {
		t.Fatalf("unknown tier: %v, fields %v", err, fields)
	}
	if _, err := client.Check(context.Background(), req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: %v", err)
	}
}

// The decider's gRPC server tells each client how many calls one
// connection may have in flight: a bound, not grpc-go's unbounded default.
func TestGRPCServerBoundsStreams(t *testing.T) {
	t.Parallel()
	cfg, _ := testAPI(t)
	conn, err := net.Dial("tcp", listenGRPC(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %v, want SETTINGS", f)
	}
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != maxStreams {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (sent: %v), want %d", v, ok, maxStreams)
	}
}
