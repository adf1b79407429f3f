package dataplane

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"connectrpc.com/connect"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/grpcserve"
	"github.com/sluicehq/sluice/internal/policy"
)

// The test tenant (decisiontest), Envoy descriptors and gRPC field
// errors, as decisiontest builds them.
var (
	testAPI    = decisiontest.Default
	apiWith    = decisiontest.With
	descriptor = decisiontest.Descriptor
	grpcFields = decisiontest.GRPCFields
)

// serveRLS serves cfg's grpc-go server on a loopback port and returns a
// stock grpc-go client of its rate limit service.
func serveRLS(t testing.TB, cfg decision.Service) rlsv3.RateLimitServiceClient {
	return rlsv3.NewRateLimitServiceClient(dialGRPC(t, cfg))
}

// listenGRPC serves svc's gRPC port, as the decider assembles it, on a
// loopback port and returns its address.
func listenGRPC(t testing.TB, svc decision.Service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpcserve.NewServer(svc)
	RegisterGRPC(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// DecisionService on grpc-go, with a stock client: decisions, and errors
// with the same codes and field details as over Connect.
func TestDecisionServiceOnGRPCGo(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	client := sluicev1.NewDecisionServiceClient(dialGRPC(t, cfg))
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
	if code, fields := grpcFields(err); code != codes.InvalidArgument || len(fields) != 1 || fields[0] != "tier" {
		t.Fatalf("unknown tier: %v, fields %v", err, fields)
	}
	if _, err := client.Check(context.Background(), req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: %v", err)
	}
	// A client that compresses its calls is understood.
	if res, err := client.Check(ctx, &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "ida"}}},
		grpc.UseCompressor("gzip")); err != nil || !res.Allowed {
		t.Fatalf("a gzip-compressed call: %v %v", res, err)
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
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != grpcserve.MaxStreams {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (sent: %v), want %d", v, ok, grpcserve.MaxStreams)
	}
}

// A blocked client gets 429 naming the blocking rule, with a limit and
// remaining of 0 and no Retry-After (it never can be admitted); Envoy gets
// OVER_LIMIT with requests_per_unit 0, as envoyproxy/ratelimit answers
// its blocklist entries.
func TestBlockedClient(t *testing.T) {
	t.Parallel()
	blocking := func(t testing.TB) (decision.Service, string) {
		return apiWith(t, []policy.Rule{
			{ID: "r1", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
				Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Minute}},
			{ID: "r2", Name: "blocklist", Match: []policy.Match{{Key: "client_id", Value: "50.0.0.5"}}, Enabled: true, Block: true,
				Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Second}},
		}, policy.Override{Identifier: "scraper-*", Block: true})
	}
	eachServer(t, blocking, func(t *testing.T, srv served, key string) {
		resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"50.0.0.5"}}`)
		if resp.StatusCode != 429 {
			t.Fatalf("a blocked client: %d %v", resp.StatusCode, m)
		}
		if v, _ := m["violated_policies"].([]any); len(v) != 1 || v[0] != "blocklist" {
			t.Fatalf("violated policies %v, want [blocklist]", m["violated_policies"])
		}
		if h := resp.Header; h.Get("X-RateLimit-Limit") != "0" || h.Get("X-RateLimit-Remaining") != "0" || h.Get("Retry-After") != "" {
			t.Fatalf("headers %v", h)
		}
		if resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"50.0.0.6"}}`); resp.StatusCode != 200 {
			t.Fatalf("another client: %d %v", resp.StatusCode, m)
		}
		resp, m = post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"scraper-3"}}`)
		if v, _ := m["violated_policies"].([]any); resp.StatusCode != 429 || len(v) != 1 || v[0] != "blocked" ||
			resp.Header.Get("RateLimit-Policy") != `"blocked";q=0;w=1` || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("a client blocked by an override: %d %v %v", resp.StatusCode, m, resp.Header)
		}
	})
	cfg, key := blocking(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	res, err := serveRLS(t, cfg).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "50.0.0.5")}})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Statuses[0]
	if res.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
		st.CurrentLimit.GetName() != "blocklist" || st.CurrentLimit.GetRequestsPerUnit() != 0 || st.LimitRemaining != 0 {
		t.Fatalf("Envoy's answer for a blocked client: %v", res)
	}
	// A client blocked by an override: the rule "blocked", 0 a second.
	res, err = serveRLS(t, cfg).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "scraper-3", "route", "/x")}})
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Statuses[0]; st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.GetName() != "blocked" ||
		st.CurrentLimit.GetRequestsPerUnit() != 0 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Fatalf("Envoy's answer for a client blocked by an override: %v", res)
	}
}

// RateLimit-Policy and the Connect answer's quota are each rule's rate,
// its limit per window; X-RateLimit-Limit and limit the most a request can
// find: a token bucket's burst, a leaky bucket's queue (of one here).
func TestPolicyStatesTheRate(t *testing.T) {
	t.Parallel()
	rated := func(t testing.TB) (decision.Service, string) {
		return apiWith(t, []policy.Rule{
			{ID: "r1", Name: "bursty", KeyBy: []string{"client_id"}, Enabled: true,
				Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 10, Burst: 20, Window: time.Minute}},
			{ID: "r2", Name: "queue", KeyBy: []string{"client_id"}, Enabled: true,
				Params: policy.Params{Algorithm: policy.LeakyBucket, Limit: 5, Window: time.Second}}})
	}
	eachServer(t, rated, func(t *testing.T, srv served, key string) {
		resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"carol"}}`)
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"bursty";q=10;w=60, "queue";q=5;w=1` || resp.Header.Get("X-RateLimit-Limit") != "1" {
			t.Errorf("%d, headers %v (%v)", resp.StatusCode, resp.Header, m)
		}
	})
	cfg, key := rated(t)
	req := connect.NewRequest(&sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "carol"}}})
	req.Header().Set("Authorization", "Bearer "+key)
	res, err := serveConnect(t, cfg).Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Msg.Rules; r[0].GetLimit() != 20 || r[0].GetQuota() != 10 || r[1].GetLimit() != 1 || r[1].GetQuota() != 5 {
		t.Errorf("the Connect answer: %v, want limits 20 and 1, quotas 10 and 5", r)
	}
}

// A client whose override changes a rule's limit and window is told the
// override's, in every answer: RateLimit-Policy, the Connect answer's
// window, Envoy's requests_per_unit and unit. Others are told the rule's.
func TestOverridesLimitAndWindowAreTheOnesAnswered(t *testing.T) {
	t.Parallel()
	overridden := func(t testing.TB) (decision.Service, string) {
		return apiWith(t, []policy.Rule{{ID: "r1", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Minute}}},
			policy.Override{Identifier: "partner", RuleID: "r1", Params: &policy.Params{Algorithm: policy.FixedWindow, Limit: 50, Window: time.Second}})
	}
	eachServer(t, overridden, func(t *testing.T, srv served, key string) {
		for client, want := range map[string]string{"partner": `"per-client";q=50;w=1`, "alice": `"per-client";q=3;w=60`} {
			resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"`+client+`"}}`)
			if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != want {
				t.Errorf("%s: %d, RateLimit-Policy %q, want %q (%v)", client, resp.StatusCode, resp.Header.Get("RateLimit-Policy"), want, m)
			}
		}
	})
	cfg, key := overridden(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	for client, want := range map[string]struct {
		n    uint32
		unit rlsv3.RateLimitResponse_RateLimit_Unit
	}{"partner": {50, rlsv3.RateLimitResponse_RateLimit_SECOND}, "alice": {3, rlsv3.RateLimitResponse_RateLimit_MINUTE}} {
		res, err := serveRLS(t, cfg).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", client)}})
		if err != nil {
			t.Fatal(err)
		}
		if l := res.Statuses[0].CurrentLimit; l.GetRequestsPerUnit() != want.n || l.GetUnit() != want.unit {
			t.Errorf("Envoy's answer for %s: %v, want %d a %v", client, l, want.n, want.unit)
		}
	}
	req := connect.NewRequest(&sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "partner"}}})
	req.Header().Set("Authorization", "Bearer "+key)
	res, err := serveConnect(t, cfg).Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Msg.Rules[0]; r.GetLimit() != 50 || r.GetWindow().AsDuration() != time.Second {
		t.Errorf("the Connect answer for partner: %v, want 50 a second", r)
	}
}
