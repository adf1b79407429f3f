package dataplane

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/policy"
)

// A traced decider puts one span per decision in the trace of the request
// it decides, whichever API asked (HTTP on net/http and fasthttp, Connect,
// gRPC, Envoy RLS): the span's parent is the caller's traceparent, and it
// says the tenant, the outcome and the deciding rule, never the client.
func TestDecisionsJoinTheCallersTrace(t *testing.T) {
	t.Parallel()
	const (
		traceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
		parentSpan = "00f067aa0ba902b7"
	)
	traceparent := "00-" + traceID + "-" + parentSpan + "-01"
	calls := map[string]func(t *testing.T, cfg decision.Service, key string){
		"net/http": func(t *testing.T, cfg decision.Service, key string) {
			postTraced(t, serve(t, "net/http", cfg, handler(cfg)), key, traceparent)
		},
		"fasthttp": func(t *testing.T, cfg decision.Service, key string) {
			postTraced(t, serve(t, "fasthttp", cfg, handler(cfg)), key, traceparent)
		},
		"connect": func(t *testing.T, cfg decision.Service, key string) {
			req := connect.NewRequest(&sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "alice"}}})
			req.Header().Set("Authorization", "Bearer "+key)
			req.Header().Set("traceparent", traceparent)
			if _, err := serveConnect(t, cfg).Check(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		},
		"grpc": func(t *testing.T, cfg decision.Service, key string) {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key, "traceparent", traceparent)
			m := &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "alice"}}}
			if _, err := sluicev1.NewDecisionServiceClient(dialGRPC(t, cfg)).Check(ctx, m); err != nil {
				t.Fatal(err)
			}
		},
		"envoy-rls": func(t *testing.T, cfg decision.Service, key string) {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key, "traceparent", traceparent)
			req := &rlsv3.RateLimitRequest{Domain: "acme", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "alice")}}
			if _, err := serveRLS(t, cfg).ShouldRateLimit(ctx, req); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, key := testAPI(t)
			spans := tracetest.NewSpanRecorder()
			cfg.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
			call(t, cfg, key)
			ended := spans.Ended()
			if len(ended) != 1 {
				t.Fatalf("%d spans ended, want 1", len(ended))
			}
			s := ended[0]
			if s.Name() != "sluice.decide" || s.SpanContext().TraceID().String() != traceID || s.Parent().SpanID().String() != parentSpan {
				t.Fatalf("span %q in trace %s under %s; want sluice.decide in %s under %s",
					s.Name(), s.SpanContext().TraceID(), s.Parent().SpanID(), traceID, parentSpan)
			}
			attrs := map[attribute.Key]string{}
			for _, a := range s.Attributes() {
				attrs[a.Key] = a.Value.String()
				if strings.Contains(a.Value.String(), "alice") {
					t.Errorf("attribute %s names the client: %s", a.Key, a.Value.String())
				}
			}
			for k, want := range map[attribute.Key]string{"sluice.tenant": "acme", "sluice.tier": "free", "sluice.allowed": "true",
				"sluice.rule": "per-client", "sluice.config_version": "3"} {
				if attrs[k] != want {
					t.Errorf("%s = %q, want %q (all: %v)", k, attrs[k], want, attrs)
				}
			}
		})
	}
}

// postTraced makes one check of alice carrying traceparent.
func postTraced(t *testing.T, srv served, key, traceparent string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"alice"}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("traceparent", traceparent)
	resp, err := srv.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check: %s", resp.Status)
	}
}

// BenchmarkDecideTraced is what tracing costs a decision (in process, so
// that the span's share shows): untraced, traced with every span sampled
// and exported in batches, and traced with none sampled.
func BenchmarkDecideTraced(b *testing.B) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"untraced", nil}, {"sampled", sdktrace.AlwaysSample()}, {"not-sampled", sdktrace.NeverSample()}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg, key := testAPI(b)
			if tc.sampler != nil {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				cfg.Tracer = tp.Tracer("bench")
			}
			c, err := cfg.Authenticate("Bearer " + key)
			if err != nil {
				b.Fatal(err)
			}
			req := decide.Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "alice"}}, Peek: true}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cfg.Decide(context.Background(), c, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
