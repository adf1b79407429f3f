package dataplane

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/envoyrls"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
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
// the fasthttp handler of httpport.Server, as cmd/dataplane serves checks.
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
		fastCheck(&ctx, key, bodies[i%benchKeys])
		h(&ctx)
		if ctx.Response.StatusCode() != http.StatusOK {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// fastCheck makes ctx a POST /v1/check of body with key, its answer
// cleared.
func fastCheck(ctx *fasthttp.RequestCtx, key string, body []byte) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod(http.MethodPost)
	ctx.Request.SetRequestURI("/v1/check")
	ctx.Request.Header.Set("Authorization", "Bearer "+key)
	ctx.Request.Header.SetContentType("application/json")
	ctx.Request.SetBodyRaw(body)
}

// crowd gives cfg a decider bounded to one decision in flight, and keeps
// one of the tenant of key there (heldCounters): the tenant crowds a full
// decider. The returned function lets that decision end, and waits for it.
func crowd(tb testing.TB, cfg *decision.Service, key string) (release func()) {
	tb.Helper()
	held := heldCounters{InProcess: decide.InProcess{Engine: limit.NewEngine(limit.EngineConfig{}), Now: time.Now}, release: make(chan struct{})}
	cfg.Decider = decide.NewDecider(decide.Options{Counters: held, MaxInFlight: 1})
	c, err := cfg.Authenticate("Bearer " + key)
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = cfg.Decider.Decide(context.Background(), c, decide.Request{Descriptors: policy.Descriptors{{Key: "client_id", Value: "hold"}}})
	}()
	for deadline := time.Now().Add(10 * time.Second); !cfg.Decider.Crowded(c); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatal("the held decision never filled the decider")
		}
	}
	var once sync.Once
	return func() { once.Do(func() { close(held.release); <-done }) }
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

// heldCounters are the in-process counters, except that a decision of
// the client "hold" waits until release is closed: a decision kept in
// flight, so that a decider bounded to one is full.
type heldCounters struct {
	decide.InProcess
	release chan struct{}
}

func (h heldCounters) AllowBatch(ctx context.Context, budget time.Duration, batch []limit.Call) {
	for _, c := range batch {
		for _, r := range c.Reqs {
			if bytes.Contains([]byte(r.Key), []byte("hold")) {
				<-h.release
			}
		}
	}
	h.InProcess.AllowBatch(ctx, budget, batch)
}

// BenchmarkDoorRefusalFastHTTPInProcess is BenchmarkCheckFastHTTPInProcess
// for a tenant that crowds a full decider: each check is refused at the
// door (decision.Service.Door), its body never parsed. Against that
// benchmark, it is what a flood beyond its share costs the decider per
// request.
func BenchmarkDoorRefusalFastHTTPInProcess(b *testing.B) {
	cfg, key := benchConfig(b, 1_000_000, nil)
	b.Cleanup(crowd(b, &cfg, key))
	h := newServer(cfg, http.NotFoundHandler()).FastHandler()
	body := []byte(`{"descriptors":{"client_id":"client-1"}}`)
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		fastCheck(&ctx, key, body)
		h(&ctx)
		if ctx.Response.StatusCode() != http.StatusTooManyRequests {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
