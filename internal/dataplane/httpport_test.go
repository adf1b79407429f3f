package dataplane

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/internal/gubernator"
	"github.com/sluicehq/sluice/internal/unkey"
)

// FuzzCheckBody sends arbitrary bodies to POST /v1/check, POST /v1/reset,
// POST /shouldAllowRequest, Unkey's POST /v2/ratelimit.limit and
// gubernator's POST /v1/GetRateLimits, on
// net/http and on fasthttp's handler (each with its
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
		`{"descriptors":{"client_id":"alice"},"cost":5,"peek":true}`,
		`{"descriptors":{"client_id":"alice"},"limit":{"requests":5,"window":"1m"}}`,
		`{"descriptors":{"client_id":"alice"},"limit":{"requests":0,"window":"1.5s"}}`,
		`{"clientId":"alice","timestamp":1763800000}`,
		`{"clientId":""}`,
		`{"descriptors":{"client_id":"a"}} {}`,
		`[]`, `null`, `{`, `{"cost":1e400}`, `{"descriptors":{"a":1}}`,
		`{"namespace":"sms","identifier":"u1","limit":3,"duration":60000}`,
		`{"namespace":"sms","identifier":"u1","limit":3,"duration":1500,"cost":0,"async":true}`,
		`{"requests":[{"name":"n","uniqueKey":"k","hits":"1","limit":"10","duration":"1000"}]}`,
		`{"requests":[{"name":"n","unique_key":"k","hits":0,"limit":10,"duration":2,"behavior":12,"algorithm":"LEAKY_BUCKET","burst":3}]}`,
	} {
		f.Add("/v1/check", seed)
		f.Add("/v1/reset", seed)
		f.Add("/shouldAllowRequest", seed)
		f.Add(unkey.LimitPath, seed)
		f.Add(gubernator.LimitsPath, seed)
	}
	cfg, secret := testAPI(f)
	h := handler(cfg)
	fastCfg, fastSecret := testAPI(f)
	fast := newServer(fastCfg, http.NotFoundHandler()).FastHandler()
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
		if path != "/v1/check" && path != "/v1/reset" && path != unkey.LimitPath && path != gubernator.LimitsPath {
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
