package dataplane

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
)

// A tenant that has its share of a full decider in flight is refused at
// the door, before its request's body is read: a body that is not JSON, a
// message that is not protobuf, are refused alike. HTTP answers 429 with
// Retry-After and Sluice-Degraded: overload; DecisionService over gRPC
// RESOURCE_EXHAUSTED, over Connect too (once its message is read); Envoy's RLS OVER_LIMIT, an answer Envoy rejects
// whatever its failure_mode_deny. Nothing is admitted. Once the decider has
// room, the tenant is decided again.
func TestACrowdedTenantIsRefusedAtTheDoor(t *testing.T) {
	t.Parallel()
	cfg, key := decisiontest.Default(t)
	release := crowd(t, &cfg, key)
	t.Cleanup(release)

	srv := httptest.NewServer(handler(cfg))
	defer srv.Close()
	check := func(body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/check", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, body := range []string{`{"descriptors":{"client_id":"alice"}}`, `{not json`} {
		resp := check(body)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || resp.Header.Get(decision.DegradedHeader) != "overload" {
			t.Errorf("POST /v1/check %s at a crowded door: %d, Retry-After %q, %s %q; want 429, a Retry-After, overload",
				body, resp.StatusCode, resp.Header.Get("Retry-After"), decision.DegradedHeader, resp.Header.Get(decision.DegradedHeader))
		}
	}

	// Connect reads the message first, and refuses alike.
	creq := connect.NewRequest(&sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "alice"}}})
	creq.Header().Set("Authorization", "Bearer "+key)
	if _, err := serveConnect(t, cfg).Check(context.Background(), creq); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("Connect Check at a crowded door: %v, want ResourceExhausted", err)
	}

	conn := dialGRPC(t, cfg)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	if _, err := sluicev1.NewDecisionServiceClient(conn).Check(ctx, &sluicev1.CheckRequest{
		Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "alice"}}}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Check at a crowded door: %v, want ResourceExhausted", err)
	}
	corrupt := []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}
	var out []byte
	if err := conn.Invoke(ctx, "/sluice.v1.DecisionService/CheckBatch", &corrupt, &out, grpc.ForceCodecV2(rawCodec{})); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("CheckBatch of a message never read, at a crowded door: %v, want ResourceExhausted", err)
	}
	var header metadata.MD
	res, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "alice"), descriptor("client_id", "bob")}}, grpc.Header(&header))
	if err != nil || res.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || len(res.GetStatuses()) != 2 ||
		res.GetStatuses()[1].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("ShouldRateLimit at a crowded door: %v %v, want OVER_LIMIT for each descriptor", res, err)
	}
	degraded := false
	for _, h := range res.GetResponseHeadersToAdd() {
		degraded = degraded || h.GetKey() == decision.DegradedHeader && h.GetValue() == "overload"
	}
	if !degraded {
		t.Errorf("ShouldRateLimit at a crowded door adds %v, want %s: overload", res.GetResponseHeadersToAdd(), decision.DegradedHeader)
	}

	release()
	if resp := check(`{"descriptors":{"client_id":"alice"}}`); resp.StatusCode != http.StatusOK {
		t.Errorf("POST /v1/check once the decider has room: %d, want 200", resp.StatusCode)
	}
}
