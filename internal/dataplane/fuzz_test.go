package dataplane

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzCheckBody sends arbitrary bodies to POST /v1/check and POST
// /shouldAllowRequest: every answer is a decision (200, 429) or a refusal
// of the input (400, 413), never an internal error, and its body is JSON.
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
	f.Fuzz(func(t *testing.T, path, body string) {
		if path != "/v1/check" {
			path = "/shouldAllowRequest"
		}
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusTooManyRequests, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("%s %q: status %d: %s", path, body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %q: answer is not JSON: %q", path, body, rec.Body)
		}
	})
}
