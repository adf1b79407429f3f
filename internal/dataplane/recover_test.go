package dataplane

import (
	"context"
	"net/http"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
)

// A request whose handling panics (here its key's lookup, as a bug would)
// gets an internal error, on fasthttp's check API and on grpc-go's Envoy
// RLS alike, and is counted; the decider stays up and serves the next
// request. Without the recoveries either server would end the process.
func TestAPanicCostsTheRequestNotTheDecider(t *testing.T) {
	t.Parallel()
	cfg, key := testAPI(t)
	reg := prometheus.NewRegistry()
	cfg.Metrics = decision.NewMetrics(reg, cfg.Decider)
	authenticate := cfg.Authenticate
	cfg.Authenticate = func(authorization string) (*decide.Compiled, error) {
		if strings.HasSuffix(authorization, "poison") {
			panic("a bug")
		}
		return authenticate(authorization)
	}

	srv := serve(t, "fasthttp", cfg, handler(cfg))
	post := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"a"}}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := srv.Client.Do(req)
		if err != nil {
			t.Fatalf("the decider after a panic: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusInternalServerError && resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("the panic's answer is %q, want a problem", resp.Header.Get("Content-Type"))
		}
		return resp.StatusCode
	}
	if code := post("poison"); code != http.StatusInternalServerError {
		t.Fatalf("a panicking request over HTTP: %d, want 500", code)
	}
	if code := post(key); code != http.StatusOK {
		t.Fatalf("the next request over HTTP: %d, want 200", code)
	}

	rls := rlsv3.NewRateLimitServiceClient(dialGRPC(t, cfg))
	call := func(key string) error {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
		_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "acme",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "b")}})
		return err
	}
	if err := call("poison"); status.Code(err) != codes.Internal {
		t.Fatalf("a panicking request over gRPC: %v, want Internal", err)
	}
	if err := call(key); err != nil {
		t.Fatalf("the next request over gRPC: %v", err)
	}
	for _, api := range []string{"http", "grpc"} {
		if n := decisiontest.Counted(reg, "sluice_panics_total", "api", api); n != 1 {
			t.Errorf("sluice_panics_total{api=%q} = %v, want 1", api, n)
		}
	}
}
