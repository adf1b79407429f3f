package dataplane

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
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
		f.Add(UnkeyLimitPath, seed)
		f.Add(GubernatorLimitsPath, seed)
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
		if path != "/v1/check" && path != "/v1/reset" && path != UnkeyLimitPath && path != GubernatorLimitsPath {
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

// FuzzCheckJSON: the body of an admitted check, encoded by hand
// (appendCheckJSON), is the JSON encoding/json writes of the same answer:
// the same bytes when no rule name holds a '<', '>', '&', U+2028 or U+2029
// (which encoding/json escapes), the same value always.
func FuzzCheckJSON(f *testing.F) {
	f.Add("per-client", "global", false, true, int64(10), int64(3), int64(1500), int64(0), int64(0), int64(7), "")
	f.Add(`q"uo\te`, "<b>&amp;", true, false, int64(0), int64(-1), int64(-5), int64(-1), int64(2500), int64(0), "~00000000000abc")
	f.Add("é\u2028\x01", "x", false, false, int64(1)<<62, int64(0), int64(1), int64(1), int64(1), int64(-3), `job "7"`)
	f.Fuzz(func(t *testing.T, name1, name2 string, shadow, allowed bool, lim, remaining, resetMS, retryMS, delayMS, version int64, lease string) {
		// Rule names are valid UTF-8 (policy.Rule.Validate), and lease
		// names too (the decoders refuse others).
		if !utf8.ValidString(name1) || !utf8.ValidString(name2) || !utf8.ValidString(lease) {
			t.Skip()
		}
		retry := time.Duration(retryMS) * time.Microsecond * 997
		if retryMS < 0 {
			retry = limit.Never
		}
		dec := decide.Decision{Allowed: true, Version: version, Rules: []decide.RuleResult{
			{Rule: &policy.Rule{Name: name1}, Result: limit.Result{Allowed: true, Limit: lim, Remaining: remaining,
				ResetAfter: time.Duration(resetMS) * time.Microsecond * 999, Delay: time.Duration(delayMS) * time.Microsecond}},
			{Rule: &policy.Rule{Name: name2, Shadow: shadow}, Result: limit.Result{Allowed: allowed, Limit: remaining,
				Remaining: lim, RetryAfter: retry}},
		}}
		// Degraded decisions, of every reason, from the version's value.
		dec.Degradation = decide.Degradation(uint64(version) % 4)
		dec.Degraded = dec.Degradation != decide.NotDegraded
		dec.Rules[0].Unenforced = dec.Degradation == decide.StoreUnavailable && allowed
		got := appendCheckJSON(nil, dec, lease)
		want, err := json.Marshal(CheckJSON{Allowed: true, Rules: rulesJSON(dec), ConfigVersion: dec.Version, Lease: lease, Degraded: dec.Degradation.Reason()})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		if !strings.ContainsAny(name1+name2+lease, "<>&\u2028\u2029") && !bytes.Equal(got, want) {
			t.Fatalf("appendCheckJSON:\n%s\nencoding/json:\n%s", got, want)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("appendCheckJSON wrote no JSON: %v\n%s", err, got)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("appendCheckJSON:\n%s\nencoding/json:\n%s", got, want)
		}
	})
}

// FuzzParseCheckBody: a body checkBody.parse reads, the JSON decoder reads
// too, to the same check; and parse reads the bodies clients send most.
func FuzzParseCheckBody(f *testing.F) {
	common := []string{
		`{"descriptors":{"client_id":"alice"}}`,
		` { "descriptors" : { "client_id" : "alice" , "route" : "/login" } , "cost" : 2 , "tier" : "pro" } `,
		`{"descriptors":{"client_id":"a"},"lease":"l","release":true}`,
		`{"cost":-12,"release":false}`,
		`{}`,
	}
	for _, s := range common {
		var c checkBody
		if !c.parse([]byte(s)) {
			f.Fatalf("parse does not read %s", s)
		}
		f.Add(s)
	}
	for _, s := range []string{`{"Tier":"x"}`, `{"cost":1,"cost":2}`, `{"descriptors":{"a":"1","a":"2"}}`, `{"cost":-0}`,
		`{"cost":01}`, `{"cost":1e2}`, `{"tier":"\u0041"}`, `{"tier":"é"}`, `{"descriptors":null}`, `{} {}`, `{"release":tru}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		var fast checkBody
		if !fast.parse([]byte(body)) {
			if fast.fast || fast.Cost != 0 || fast.Tier != "" || fast.parsed != nil {
				t.Fatalf("parse refused %q but changed its checkBody: %+v", body, fast)
			}
			return
		}
		var slow checkBody
		if err := jsonv2.Unmarshal([]byte(body), &slow, decodeOptions); err != nil {
			t.Fatalf("parse read %q, the decoder refuses it: %v", body, err)
		}
		if fast.Tier != slow.Tier || fast.Cost != slow.Cost || fast.Lease != slow.Lease || fast.Release != slow.Release ||
			!slices.Equal(fast.descriptors(), slow.descriptors()) {
			t.Fatalf("%q: parse %+v, the decoder %+v", body, fast, slow)
		}
	})
}
