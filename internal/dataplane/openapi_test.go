package dataplane

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	"github.com/sluicehq/sluice/internal/gubernator"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/unkey"
)

// openAPITenant has a rule of each kind of answer docs/openapi.yaml
// describes: counted, rejected with a message, shadow, held (a queue's
// delay) and leased.
func openAPITenant(t testing.TB) (decision.Service, string) {
	return apiWith(t, []policy.Rule{
		{ID: "r1", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Minute}},
		{ID: "r2", Name: "login", KeyBy: []string{"client_id"}, Enabled: true, Match: []policy.Match{{Key: "route", Value: "/login"}},
			Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Minute}, Message: decisiontest.LoginMessage},
		{ID: "r3", Name: "watch", KeyBy: []string{"client_id"}, Enabled: true, Shadow: true,
			Params: policy.Params{Algorithm: policy.SlidingLog, Limit: 1, Window: time.Minute}},
		{ID: "r4", Name: "queue", KeyBy: []string{"client_id"}, Enabled: true, Match: []policy.Match{{Key: "route", Value: "/queue"}},
			Params: policy.Params{Algorithm: policy.LeakyBucket, Limit: 1, Window: time.Second, MaxDelay: 10 * time.Second}},
		{ID: "r5", Name: "exports", KeyBy: []string{"client_id"}, Enabled: true, Match: []policy.Match{{Key: "route", Value: "/export"}},
			Params: policy.Params{Algorithm: policy.Concurrency, Limit: 1, LeaseTTL: time.Minute}},
	})
}

// docs/openapi.yaml describes what the decider's HTTP API does: a request
// either server takes (2xx, 429) is one the document allows, a request
// the document refuses the servers refuse too (400, 413), and every answer
// — status, headers, body — is one the document describes.
func TestOpenAPI(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	eachServer(t, openAPITenant, func(t *testing.T, srv served, key string) {
		huge := `{"descriptors":{"client_id":"` + strings.Repeat("x", 2000) + `"}}`
		for _, c := range []struct {
			name, path, key, body, encoding string
			status                          int
		}{
			{"allowed", "/v1/check", key, `{"descriptors":{"client_id":"alice"}}`, "", 200},
			{"all fields", "/v1/check", key, `{"descriptors":{"client_id":"alice"},"tier":"free","cost":1,"peek":true}`, "", 200},
			{"a request's own limit", "/v1/check", key, `{"descriptors":{"client_id":"alice"},"limit":{"requests":5,"window":"1m"}}`, "", 200},
			{"a token bucket of its own", "/v1/check", key, `{"descriptors":{"client_id":"alice"},"limit":{"requests":5,"window":"1m","algorithm":"token_bucket"}}`, "", 200},
			{"a limit over the bound", "/v1/check", key, `{"descriptors":{"client_id":"alice"},"limit":{"requests":1000000000000,"window":"1h"}}`, "", 400},
			{"an algorithm that is none", "/v1/check", key, `{"descriptors":{"client_id":"alice"},"limit":{"requests":5,"window":"1m","algorithm":"fastest"}}`, "", 400},
			{"an algorithm a request may not bring", "/v1/check", key, `{"descriptors":{"client_id":"alice"},"limit":{"requests":5,"window":"1m","algorithm":"concurrency"}}`, "", 400},
			{"delayed", "/v1/check", key, `{"descriptors":{"client_id":"bob","route":"/queue"}}`, "", 200},
			{"delayed again", "/v1/check", key, `{"descriptors":{"client_id":"bob","route":"/queue"}}`, "", 200},
			{"leased", "/v1/check", key, `{"descriptors":{"client_id":"carol","route":"/export"},"lease":"job-1"}`, "", 200},
			{"lease taken", "/v1/check", key, `{"descriptors":{"client_id":"carol","route":"/export"},"lease":"job-2"}`, "", 429},
			{"released", "/v1/check", key, `{"descriptors":{"client_id":"carol","route":"/export"},"lease":"job-1","release":true}`, "", 200},
			{"login", "/v1/check", key, `{"descriptors":{"client_id":"dave","route":"/login"}}`, "", 200},
			{"login rejected", "/v1/check", key, `{"descriptors":{"client_id":"dave","route":"/login"}}`, "", 429},
			{"cost over every limit", "/v1/check", key, `{"descriptors":{"client_id":"erin"},"cost":1000}`, "", 429},
			{"negative cost", "/v1/check", key, `{"descriptors":{"client_id":"alice"},"cost":-1}`, "", 400},
			{"unknown member", "/v1/check", key, `{"descriptors":{"client_id":"alice"},"costs":1}`, "", 400},
			{"bad descriptor key", "/v1/check", key, `{"descriptors":{"":"alice"}}`, "", 400},
			{"not JSON", "/v1/check", key, `{"descriptors":`, "", 400},
			{"too large", "/v1/check", key, huge, "", 413},
			{"no key", "/v1/check", "", `{"descriptors":{"client_id":"alice"}}`, "", 401},
			{"another key", "/v1/check", "sk_check_nobodys", `{"descriptors":{"client_id":"alice"}}`, "", 401},
			{"reset", "/v1/reset", key, `{"descriptors":{"client_id":"dave","route":"/login"}}`, "", 200},
			{"reset, unknown member", "/v1/reset", key, `{"descriptor":{"client_id":"dave"}}`, "", 400},
			{"seed", "/shouldAllowRequest", key, `{"clientId":"frank","timestamp":1763800000}`, "", 200},
			{"seed, to the limit", "/shouldAllowRequest", key, `{"clientId":"frank"}`, "", 200},
			{"seed, once more", "/shouldAllowRequest", key, `{"clientId":"frank"}`, "", 200},
			{"seed rejected", "/shouldAllowRequest", key, `{"clientId":"frank"}`, "", 429},
			{"seed without a client", "/shouldAllowRequest", key, `{"timestamp":1}`, "", 400},
			{"gzip", "/v1/check", key, `{"descriptors":{"client_id":"alice"}}`, "gzip", 415},
			{"identity", "/v1/check", key, `{"descriptors":{"client_id":"alice"}}`, "identity", 200},
			{"unkey", unkey.LimitPath, key, `{"namespace":"sms.sign_up","identifier":"u1","limit":1,"duration":60000,"cost":1,"async":false}`, "", 200},
			{"unkey, over", unkey.LimitPath, key, `{"namespace":"sms.sign_up","identifier":"u1","limit":1,"duration":60000}`, "", 200},
			{"unkey, a duration of no whole seconds", unkey.LimitPath, key, `{"namespace":"a","identifier":"u1","limit":1,"duration":1500}`, "", 400},
			{"unkey, unknown member", unkey.LimitPath, key, `{"namespace":"a","identifier":"u1","limit":1,"duration":60000,"meta":{}}`, "", 400},
			{"unkey, no key", unkey.LimitPath, "", `{"namespace":"a","identifier":"u1","limit":1,"duration":60000}`, "", 401},
			{"unkey, gzip", unkey.LimitPath, key, `{"namespace":"a","identifier":"u1","limit":1,"duration":60000}`, "gzip", 415},
			{"unkey, too large", unkey.LimitPath, key, `{"namespace":"a","identifier":"` + strings.Repeat("u", 2000) + `","limit":1,"duration":60000}`, "", 413},
			{"gubernator", gubernator.LimitsPath, key, `{"requests":[{"name":"requests_per_sec","uniqueKey":"account:1","hits":"1","limit":"10","duration":"1000"}]}`, "", 200},
			{"gubernator, proto names and numbers", gubernator.LimitsPath, key, `{"requests":[{"name":"n","unique_key":"k","hits":1,"limit":1,"duration":60000,"algorithm":"LEAKY_BUCKET","behavior":10,"metadata":{"a":"b"}}]}`, "", 200},
			{"gubernator, over", gubernator.LimitsPath, key, `{"requests":[{"name":"n","unique_key":"k","hits":1,"limit":1,"duration":60000,"algorithm":1}]}`, "", 200},
			{"gubernator, a request it cannot decide", gubernator.LimitsPath, key, `{"requests":[{"name":"n","unique_key":"","hits":1,"limit":10,"duration":1500}]}`, "", 200},
			{"gubernator, no requests", gubernator.LimitsPath, key, `{"requests":[]}`, "", 200},
			{"gubernator, not JSON", gubernator.LimitsPath, key, `{"requests":`, "", 400},
			{"gubernator, no key", gubernator.LimitsPath, "", `{"requests":[{"name":"n","unique_key":"k","hits":1,"limit":1,"duration":1000}]}`, "", 401},
			{"gubernator, gzip", gubernator.LimitsPath, key, `{"requests":[{"name":"n","unique_key":"k","hits":1,"limit":1,"duration":1000}]}`, "gzip", 415},
			{"gubernator, too large", gubernator.LimitsPath, key, `{"requests":[{"name":"` + strings.Repeat("n", 2000) + `","unique_key":"k","hits":1,"limit":1,"duration":1000}]}`, "", 413},
		} {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			if c.encoding != "" {
				req.Header.Set("Content-Encoding", c.encoding)
			}
			if c.key != "" {
				req.Header.Set("Authorization", "Bearer "+c.key)
			}
			item := doc.Paths.Find(c.path)
			if item == nil || item.Post == nil {
				t.Fatalf("%s: POST %s is not in docs/openapi.yaml", c.name, c.path)
			}
			in := &openapi3filter.RequestValidationInput{Request: req, Options: opts,
				Route: &routers.Route{Spec: doc, Path: c.path, PathItem: item, Method: http.MethodPost, Operation: item.Post}}
			refused := openapi3filter.ValidateRequest(context.Background(), in)
			req.Body = io.NopCloser(strings.NewReader(c.body)) // as sent, whatever the validation read
			resp, err := srv.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("%s: %d %s, want %d", c.name, resp.StatusCode, body, c.status)
			}
			taken := c.status < 300 || c.status == http.StatusTooManyRequests
			if taken && refused != nil {
				t.Errorf("%s: the server took it, the document refuses it: %v", c.name, refused)
			}
			if refused != nil && resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Errorf("%s: the document refuses it (%v), the server answered %d", c.name, refused, resp.StatusCode)
			}
			out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
				Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)), Options: opts}
			if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
				t.Errorf("%s: the answer is not as documented: %v\n%s %v", c.name, err, body, resp.Header)
			}
		}
		// gubernator's health check, a GET with no key.
		req, _ := http.NewRequest(http.MethodGet, srv.URL+gubernator.HealthPath, nil)
		item := doc.Paths.Find(gubernator.HealthPath)
		if item == nil || item.Get == nil {
			t.Fatalf("GET %s is not in docs/openapi.yaml", gubernator.HealthPath)
		}
		in := &openapi3filter.RequestValidationInput{Request: req, Options: opts,
			Route: &routers.Route{Spec: doc, Path: gubernator.HealthPath, PathItem: item, Method: http.MethodGet, Operation: item.Get}}
		resp, err := srv.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
			Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)), Options: opts}
		if err := openapi3filter.ValidateResponse(context.Background(), out); resp.StatusCode != 200 || err != nil {
			t.Errorf("GET %s: %d %s: %v", gubernator.HealthPath, resp.StatusCode, body, err)
		}
	})
}
