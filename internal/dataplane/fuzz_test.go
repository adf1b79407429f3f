package dataplane

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FuzzCheckBody sends arbitrary bodies to POST /v1/check and POST
// /shouldAllowRequest, on net/http and on fasthttp's handler (each with its
// own counters, in step): every answer is a decision (200, 429) or a
// refusal of the input (400, 413), never an internal error, its body is
// JSON, and both servers answer alike (within the body's bound).
func FuzzCheckBody(f *testing.F) {
	for _, seed := range []string{
		`{"descriptors":{"client_id":"alice"}}`,
		`{"descriptors":{"client_id":"alice","route":"/login"},"cost":2}`,
		`{"descriptors":{"client_id":"a"},"tier":"gold"}`,
		`{"descriptors":{"":"x"},"cost":-1}`,
		`{"descriptors":{"client_id":"a"},"lease":"l","release":true}`,
		`{"clientId":"alice","timestamp":1763800000}`,
		`{"clientId":""}`,
		`{"descriptors":{"client_id":"a"}} {}`,
		`[]`, `null`, `{`, `{"cost":1e400}`, `{"descriptors":{"a":1}}`,
	} {
		f.Add("/v1/check", seed)
		f.Add("/shouldAllowRequest", seed)
	}
	cfg, secret := testAPI(f)
	h := NewHTTPHandler(cfg)
	fastCfg, fastSecret := testAPI(f)
	fast := NewHTTPServer(fastCfg, http.NotFoundHandler()).fast.Handler
	check := func(t *testing.T, path, body string, status int, answer []byte) {
		switch status {
		case http.StatusOK, http.StatusTooManyRequests, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("%s %q: status %d: %s", path, body, status, answer)
		}
		if !json.Valid(answer) {
			t.Fatalf("%s %q: answer is not JSON: %q", path, body, answer)
		}
	}
	f.Fuzz(func(t *testing.T, path, body string) {
		if path != "/v1/check" {
			path = "/shouldAllowRequest"
		}
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		check(t, path, body, rec.Code, rec.Body.Bytes())

		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(http.MethodPost)
		ctx.Request.SetRequestURI(path)
		ctx.Request.Header.Set("Authorization", "Bearer "+fastSecret)
		ctx.Request.SetBodyString(body)
		fast(&ctx)
		check(t, path, body, ctx.Response.StatusCode(), ctx.Response.Body())
		// Beyond the bound, net/http may find a syntax error (400) before it
		// reads too much (413); fasthttp has read it all first.
		if ctx.Response.StatusCode() != rec.Code && int64(len(body)) <= fastCfg.MaxBodyBytes {
			t.Fatalf("%s %q: fasthttp answered %d, net/http %d", path, body, ctx.Response.StatusCode(), rec.Code)
		}
	})
}

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
	s := NewRLS(cfg)
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
