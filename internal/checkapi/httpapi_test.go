package checkapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/httpport/httpporttest"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/rlheaders"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// The tenant of the check API's tests (decisiontest): testAPI's free
// tier allows 3 per minute per client and 2 per minute on /login.
var (
	testAPI    = decisiontest.Default
	apiWith    = decisiontest.With
	descriptor = decisiontest.Descriptor
	grpcFields = decisiontest.GRPCFields
)

// served is a check API served for a test (httpporttest).
type served = httpporttest.Served

// serverKinds are the ways the check API is served: each test of the API
// runs against both.
var serverKinds = httpporttest.Kinds

// serve serves cfg's check API the given way until the test ends, with
// next the handler of net/http (on its own, or behind httpport.Server).
func serve(t *testing.T, kind string, cfg decision.Service, next http.Handler) served {
	t.Helper()
	return httpporttest.Serve(t, kind, cfg, Routes, next)
}

// eachServer runs f against a check API of mk's config on each kind of
// server, with its check key.
func eachServer(t *testing.T, mk func(testing.TB) (decision.Service, string), f func(t *testing.T, srv served, key string)) {
	httpporttest.Each(t, mk, Routes, f)
}

// handler is the net/http handler of cfg's check API.
func handler(cfg decision.Service) http.Handler {
	return httpport.Handler(Routes(httpport.NewAPI(cfg)))
}

// loginMessage is the test tenant's login rule's message for the clients
// it rejects.
const loginMessage = decisiontest.LoginMessage

var post = httpporttest.Post

func TestCheckUntilRejected(t *testing.T) {
	t.Parallel()
	eachServer(t, testAPI, testCheckUntilRejected)
}

func testCheckUntilRejected(t *testing.T, srv served, key string) {
	body := `{"descriptors":{"client_id":"alice","route":"/login"}}`
	for i := range 2 {
		resp, m := post(t, srv, "/v1/check", key, body)
		if resp.StatusCode != 200 || m["allowed"] != true {
			t.Fatalf("check %d: %d %v", i, resp.StatusCode, m)
		}
	}
	resp, m := post(t, srv, "/v1/check", key, body)
	if resp.StatusCode != 429 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("third login: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if v := m["violated_policies"].([]any); len(v) != 1 || v[0] != "login" {
		t.Fatalf("violated policies %v, want [login]", v)
	}
	// The tenant's words for the client: the problem's detail, and the
	// rejecting rule's message (none on the rule that passed).
	rules, _ := m["rules"].([]any)
	if m["detail"] != loginMessage || len(rules) != 2 || rules[1].(map[string]any)["message"] != loginMessage || rules[0].(map[string]any)["message"] != nil {
		t.Fatalf("the rejection's message: detail %v, rules %v", m["detail"], rules)
	}
	// Headers of the rule that denied (login: 2, 0 left), not of per-client (3, 1 left).
	h := resp.Header
	want := map[string]string{
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "45", "Retry-After": "45",
		"RateLimit-Policy": `"per-client";q=3;w=60, "login";q=2;w=60`,
		"RateLimit":        `"per-client";r=1;t=45, "login";r=0;t=45`,
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

// A decider configured for draft 6's headers, or Kong's, answers them, on
// both servers, and none of the IETF form.
func TestCheckAnswersTheConfiguredHeaders(t *testing.T) {
	t.Parallel()
	for style, want := range map[rlheaders.Style]map[string]string{
		rlheaders.Draft6: {
			"RateLimit-Policy": "3;w=60, 2;w=60", "RateLimit-Limit": "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "45",
			"X-RateLimit-Limit": "2", "Retry-After": "45", "RateLimit": "",
		},
		// Of the two per-minute rules, login's, with less remaining.
		rlheaders.Kong: {
			"X-RateLimit-Limit-Minute": "2", "X-RateLimit-Remaining-Minute": "0", "RateLimit-Limit": "2", "RateLimit-Remaining": "0",
			"RateLimit-Reset": "45", "Retry-After": "45", "RateLimit-Policy": "", "X-RateLimit-Limit": "",
		},
	} {
		t.Run(style.String(), func(t *testing.T) {
			t.Parallel()
			styled := func(t testing.TB) (decision.Service, string) {
				cfg, key := testAPI(t)
				cfg.Headers = style
				return cfg, key
			}
			eachServer(t, styled, func(t *testing.T, srv served, key string) {
				body := `{"descriptors":{"client_id":"bob","route":"/login"}}`
				post(t, srv, "/v1/check", key, body)
				post(t, srv, "/v1/check", key, body)
				resp, _ := post(t, srv, "/v1/check", key, body)
				for k, v := range want {
					if got := resp.Header.Get(k); resp.StatusCode != 429 || got != v {
						t.Errorf("%d, %s: %q, want %q", resp.StatusCode, k, got, v)
					}
				}
			})
		})
	}
}

// A peek answers with what remains and consumes nothing.
func TestCheckPeeks(t *testing.T) {
	t.Parallel()
	var metrics sync.Map // of each server's config
	withMetrics := func(t testing.TB) (decision.Service, string) {
		cfg, key := testAPI(t)
		reg := prometheus.NewRegistry()
		cfg.Metrics = decision.NewMetrics(reg, cfg.Decider)
		metrics.Store(key, reg)
		return cfg, key
	}
	eachServer(t, withMetrics, func(t *testing.T, srv served, key string) {
		for i := range 3 {
			resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"pia"},"cost":2,"peek":true}`)
			if resp.StatusCode != 200 || m["allowed"] != true || resp.Header.Get("X-RateLimit-Remaining") != "3" {
				t.Fatalf("peek %d: %d %v %v", i, resp.StatusCode, m, resp.Header)
			}
		}
		resp, _ := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"pia"}}`)
		if resp.Header.Get("X-RateLimit-Remaining") != "2" {
			t.Fatalf("the check after peeks left %s, want 2", resp.Header.Get("X-RateLimit-Remaining"))
		}
		// 2 left: a peek of 3 would be rejected, at the latest until the
		// window's end (45 s on).
		resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"pia"},"cost":3,"peek":true}`)
		if resp.StatusCode != 429 || m["violated_policies"] == nil || resp.Header.Get("Retry-After") != "45" {
			t.Fatalf("a peek beyond what is left: %d %v %v", resp.StatusCode, m, resp.Header)
		}
		// Peeks have an outcome of their own: a rejected one is not a
		// rejection in the decider's metrics.
		v, _ := metrics.Load(key)
		reg := v.(*prometheus.Registry)
		for outcome, want := range map[string]float64{"peek": 4, "allowed": 1, "rejected": 0} {
			if got := decisiontest.Counted(reg, "sluice_decisions_total", "tenant", "acme", "outcome", outcome); got != want {
				t.Errorf("decisions %s: %v, want %v", outcome, got, want)
			}
		}
	})
}

func TestShouldAllowRequest(t *testing.T) {
	t.Parallel()
	eachServer(t, testAPI, testShouldAllowRequest)
}

func testShouldAllowRequest(t *testing.T, srv served, key string) {
	var answers []bool
	for range 4 {
		_, m := post(t, srv, "/shouldAllowRequest", key, `{"clientId":"bob","timestamp":1700000000}`)
		answers = append(answers, m["allowed"].(bool))
	}
	if want := []bool{true, true, true, false}; !slices.Equal(answers, want) {
		t.Fatalf("answers %v, want %v", answers, want)
	}
}

func TestCheckRefusesBadRequests(t *testing.T) {
	t.Parallel()
	eachServer(t, testAPI, testCheckRefusesBadRequests)
}

func testCheckRefusesBadRequests(t *testing.T, srv served, key string) {
	tests := []struct {
		name, key, body string
		status          int
		field           string
	}{
		{"no key", "", `{}`, 401, ""},
		{"unknown key", "sk_check_nope", `{}`, 401, ""},
		{"malformed JSON", key, `{"descriptors":`, 400, ""},
		{"unknown field", key, `{"tenant":"other"}`, 400, ""},
		{"trailing data", key, `{} {}`, 400, ""},
		{"null", key, `null`, 400, ""},
		{"an array", key, ` [{}]`, 400, ""},
		{"a number", key, `1`, 400, ""},
		{"no body", key, ``, 400, ""},
		{"a field twice", key, `{"tier":"free","tier":"gold"}`, 400, ""},
		{"wrong type", key, `{"cost":"5"}`, 400, ""},
		{"too large", key, `{"descriptors":{"client_id":"` + strings.Repeat("x", 2000) + `"}}`, 413, ""},
		{"negative cost", key, `{"cost":-2}`, 400, "cost"},
		{"unknown tier", key, `{"tier":"gold"}`, 400, "tier"},
		{"bad descriptor", key, `{"descriptors":{"no spaces":"x"}}`, 400, "descriptors[0].key"},
		{"limit without requests", key, `{"limit":{"window":"1m"}}`, 400, "limit.requests"},
		{"limit of no duration", key, `{"limit":{"requests":5,"window":"soon"}}`, 400, "limit.window"},
		{"limit of a split second", key, `{"limit":{"requests":5,"window":"1500ms"}}`, 400, "limit.window"},
		{"limit of two years", key, `{"limit":{"requests":5,"window":"17520h"}}`, 400, "limit.window"},
		{"limit of no algorithm", key, `{"limit":{"requests":5,"window":"1m","algorithm":"fastest"}}`, 400, "limit.algorithm"},
		{"limit of concurrency", key, `{"limit":{"requests":5,"window":"1m","algorithm":"concurrency"}}`, 400, "limit.algorithm"},
		{"a latency without release", key, `{"latency_ms":12}`, 400, "latency_ms"},
		{"a negative latency", key, `{"lease":"x","release":true,"latency_ms":-1}`, 400, "latency_ms"},
		{"an unknown outcome", key, `{"lease":"x","release":true,"latency_ms":5,"outcome":"fine"}`, 400, "outcome"},
	}
	for _, tt := range tests {
		resp, m := post(t, srv, "/v1/check", tt.key, tt.body)
		if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s, want %d problem+json", tt.name, resp.StatusCode, resp.Header.Get("Content-Type"), tt.status)
			continue
		}
		if tt.field != "" {
			errs, _ := m["errors"].([]any)
			var desc string
			if len(errs) == 1 {
				desc, _ = errs[0].(map[string]any)["description"].(string)
			}
			if len(errs) != 1 || errs[0].(map[string]any)["field"] != tt.field || desc == "" {
				t.Errorf("%s: errors %v, want one on %s", tt.name, m["errors"], tt.field)
			}
		}
	}
	resp, _ := post(t, srv, "/shouldAllowRequest", key, `{"timestamp":1}`)
	if resp.StatusCode != 400 {
		t.Errorf("shouldAllowRequest without clientId: %d", resp.StatusCode)
	}
}

// A check's own limit decides it in place of the tier's rules (3 a minute
// per client): 5 an hour here, counted apart, named for its window and
// descriptors in the answer.
func TestCheckWithItsOwnLimit(t *testing.T) {
	t.Parallel()
	eachServer(t, testAPI, func(t *testing.T, srv served, key string) {
		const body = `{"descriptors":{"client_id":"alice"},"limit":{"requests":5,"window":"1h"}}`
		for i := range 6 {
			resp, m := post(t, srv, "/v1/check", key, body)
			want := map[bool]int{true: 200, false: 429}[i < 5]
			if resp.StatusCode != want || resp.Header.Get("X-RateLimit-Limit") != "5" {
				t.Fatalf("check %d: %d, limit %s; want %d, 5", i, resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"), want)
			}
			if i == 0 {
				rules, _ := m["rules"].([]any)
				if len(rules) != 1 || rules[0].(map[string]any)["rule"] != "limit/3600s/client_id" {
					t.Fatalf("rules %v", m["rules"])
				}
			}
		}
		if resp, _ := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"alice"}}`); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit") != "3" {
			t.Fatalf("alice under the tier's rules: %d, limit %s", resp.StatusCode, resp.Header.Get("X-RateLimit-Limit"))
		}
		// A window in days.
		_, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"alice"},"limit":{"requests":5,"window":"1d"}}`)
		if rules, _ := m["rules"].([]any); len(rules) != 1 || rules[0].(map[string]any)["rule"] != "limit/86400s/client_id" {
			t.Fatalf("a day's limit: %v", m)
		}
	})
}

// A concurrency rule: checks with a lease take it, a check with release
// ends it, and a release without a lease is a field error.
func TestLeasesTakenAndReleased(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t testing.TB) (decision.Service, string) {
		return apiWith(t, []policy.Rule{{ID: "c", Name: "in-flight", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.Concurrency, Limit: 1, LeaseTTL: time.Minute}}})
	}, testLeases)
}

func testLeases(t *testing.T, srv served, key string) {
	status := func(body string) int {
		resp, _ := post(t, srv, "/v1/check", key, body)
		return resp.StatusCode
	}
	if s := status(`{"descriptors":{"client_id":"a"},"lease":"job-1"}`); s != 200 {
		t.Fatalf("first lease: %d", s)
	}
	if s := status(`{"descriptors":{"client_id":"a"},"lease":"job-2"}`); s != 429 {
		t.Fatalf("second lease while the first is held: %d", s)
	}
	if s := status(`{"descriptors":{"client_id":"a"},"release":true}`); s != 400 {
		t.Fatalf("release without a lease: %d", s)
	}
	if s := status(`{"descriptors":{"client_id":"a"},"lease":"job-1","release":true}`); s != 200 {
		t.Fatalf("release: %d", s)
	}
	if s := status(`{"descriptors":{"client_id":"a"},"lease":"job-2"}`); s != 200 {
		t.Fatalf("a lease after the release: %d", s)
	}
	// A check naming no lease takes one of its own, which the answer names
	// for the release; a second such check finds the slot taken.
	resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"b"}}`)
	lease, _ := m["lease"].(string)
	if resp.StatusCode != 200 || len(lease) != 15 || lease[0] != '~' {
		t.Fatalf("a check naming no lease: %d, lease %q", resp.StatusCode, lease)
	}
	if s := status(`{"descriptors":{"client_id":"b"}}`); s != 429 {
		t.Fatalf("a second check naming no lease while the first holds it: %d", s)
	}
	if s := status(`{"descriptors":{"client_id":"b"},"lease":"` + lease + `","release":true,"latency_ms":12.5,"outcome":"dropped"}`); s != 200 {
		t.Fatalf("release of %s, with how its request went: %d", lease, s)
	}
	if resp, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"b"}}`); resp.StatusCode != 200 || m["lease"] == lease {
		t.Fatalf("after the release: %d, lease %v (the first %s)", resp.StatusCode, m["lease"], lease)
	}
	// A named lease is named back; a peek takes none.
	if _, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"c"},"lease":"job-3"}`); m["lease"] != "job-3" {
		t.Fatalf("a named lease answered as %v", m["lease"])
	}
	if _, m := post(t, srv, "/v1/check", key, `{"descriptors":{"client_id":"d"},"peek":true}`); m["lease"] != nil {
		t.Fatalf("a peek took lease %v", m["lease"])
	}
	if s := status(`{"descriptors":{"client_id":"d"}}`); s != 200 {
		t.Fatalf("a check after a peek: %d", s)
	}
}

// A check whose client has gone away is not a failure of the decider: it
// is answered 499 and logged at debug level, never as an error.
func TestCanceledCheckIsNotAnError(t *testing.T) {
	cfg, secret := testAPI(t)
	c, prefix := redistest.Client(t) // an engine that honours the context, as Redis's does
	cfg.Decider = decide.NewDecider(decide.Options{Counters: redisengine.New(c, redisengine.Config{Prefix: prefix}),
		Local: limit.NewEngine(limit.EngineConfig{}), Budget: time.Second})
	var logs strings.Builder
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h := handler(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/check", strings.NewReader(`{"descriptors":{"client_id":"c1"}}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != httpport.StatusClientClosed {
		t.Errorf("status %d, want %d; body %s", rec.Code, httpport.StatusClientClosed, rec.Body)
	}
	if logs.Len() != 0 {
		t.Errorf("a canceled check logged %q", logs.String())
	}
}

// Another method on a check path is 405 naming the methods, also beside a
// catch-all handler (sluice dev's control plane), which would say 404.
func TestCheckPathsRefuseOtherMethods(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle("/", http.NotFoundHandler())
	httpport.Mount(mux, Routes(httpport.NewAPI(decision.Service{})), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodGet, "/v1/check", http.StatusMethodNotAllowed, "POST, OPTIONS"},
		{http.MethodPut, "/v1/reset", http.StatusMethodNotAllowed, "POST, OPTIONS"},
		{http.MethodGet, "/shouldAllowRequest", http.StatusMethodNotAllowed, "POST"},
		{http.MethodPost, "/v1/check", http.StatusTeapot, ""},
		{http.MethodOptions, "/v1/check", http.StatusTeapot, ""},
		{http.MethodGet, "/elsewhere", http.StatusNotFound, ""},
	} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, nil))
		if w.Code != tc.status || w.Header().Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d, Allow %q; want %d, %q", tc.method, tc.path, w.Code, w.Header().Get("Allow"), tc.status, tc.allow)
		}
		if tc.status == http.StatusMethodNotAllowed && w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %s, want a problem", tc.method, tc.path, w.Header().Get("Content-Type"))
		}
	}
}
