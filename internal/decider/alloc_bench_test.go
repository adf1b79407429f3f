package decider

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/envoyrls"
	"github.com/sluicehq/sluice/internal/limit"
)

// BenchmarkShouldRateLimitInProcess is one Envoy request of one descriptor
// through the handler alone, on the in-process engine: no network, no
// Redis. Its allocs/op guards what the decider allocates per decision.
func BenchmarkShouldRateLimitInProcess(b *testing.B) {
	cfg, key := benchConfig(b, 1_000_000, nil)
	cfg.Decider = decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: time.Now}, time.Now)
	s := envoyrls.NewRLS(cfg)
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

// BenchmarkCheckHTTPInProcess is one POST /v1/check through the handler
// alone, on the in-process engine: no network, no Redis.
func BenchmarkCheckHTTPInProcess(b *testing.B) {
	cfg, key := benchConfig(b, 1_000_000, nil)
	cfg.Decider = decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: time.Now}, time.Now)
	h := handler(cfg)
	bodies := make([][]byte, benchKeys)
	for i := range bodies {
		bodies[i] = []byte(`{"descriptors":{"client_id":"client-` + strconv.Itoa(i) + `"}}`)
	}
	req := httptest.NewRequest("POST", "/v1/check", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		req.Body = io.NopCloser(bytes.NewReader(bodies[i%benchKeys]))
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, req)
		if w.code != http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
	}
}

// BenchmarkCheckFastHTTPInProcess is BenchmarkCheckHTTPInProcess through
// the fasthttp handler of httpcheck.Server, as cmd/dataplane serves checks.
func BenchmarkCheckFastHTTPInProcess(b *testing.B) {
	cfg, key := benchConfig(b, 1_000_000, nil)
	cfg.Decider = decide.New(decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: time.Now}, time.Now)
	h := newServer(cfg, http.NotFoundHandler()).FastHandler()
	bodies := make([][]byte, benchKeys)
	for i := range bodies {
		bodies[i] = []byte(`{"descriptors":{"client_id":"client-` + strconv.Itoa(i) + `"}}`)
	}
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod(http.MethodPost)
		ctx.Request.SetRequestURI("/v1/check")
		ctx.Request.Header.Set("Authorization", "Bearer "+key)
		ctx.Request.Header.SetContentType("application/json")
		ctx.Request.SetBodyRaw(bodies[i%benchKeys])
		h(&ctx)
		if ctx.Response.StatusCode() != http.StatusOK {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// discardWriter is a ResponseWriter that keeps only the status and headers.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *discardWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}
