package checkapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/httpport"
)

func TestCORSLetsOnlyListedOriginsCallChecks(t *testing.T) {
	t.Parallel()
	for _, kind := range serverKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testCORS(t, kind)
		})
	}
}

func testCORS(t *testing.T, kind string) {
	cfg, key := testAPI(t)
	h := httpport.CORS([]string{"http://console.example"}, handler(cfg))
	mux := http.NewServeMux()
	mux.Handle("POST /v1/check", h)
	mux.Handle("OPTIONS /v1/check", h)
	srv := serve(t, kind, cfg, mux)
	do := func(method, origin string) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"cors"}}`))
		req.Header.Set("Origin", origin)
		req.Header.Set("Authorization", "Bearer "+key)
		if method == http.MethodOptions {
			req.Header.Set("Access-Control-Request-Method", "POST")
		}
		resp, err := srv.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	pre := do(http.MethodOptions, "http://console.example")
	if pre.StatusCode != 204 || pre.Header.Get("Access-Control-Allow-Origin") != "http://console.example" ||
		!strings.Contains(pre.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight: %d %v", pre.StatusCode, pre.Header)
	}
	post := do(http.MethodPost, "http://console.example")
	if post.StatusCode != 200 || !strings.Contains(post.Header.Get("Access-Control-Expose-Headers"), "Retry-After") {
		t.Fatalf("check: %d %v", post.StatusCode, post.Header)
	}
	if other := do(http.MethodPost, "http://evil.example"); other.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("another origin was allowed: %v", other.Header)
	}
}
