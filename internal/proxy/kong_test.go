package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	"github.com/sluicehq/sluice/internal/kongimport"
	"github.com/sluicehq/sluice/internal/rlheaders"
)

// A Kong configuration imported (sluice import -kong) is enforced by the
// proxy as Kong would: a service's limit over both its routes' paths in
// one counter per consumer, a route's own limit by header in its place,
// answered with Kong's headers.
func TestProxyEnforcesAnImportedKongConfig(t *testing.T) {
	t.Parallel()
	plan, err := kongimport.Parse(strings.NewReader(`
_format_version: "3.0"
services:
  - name: orders
    url: http://orders:8080
    routes:
      - {name: orders, paths: [/orders, /v2/orders]}
      - name: login
        paths: [/login]
        plugins: [{name: rate-limiting, config: {minute: 1, limit_by: header, header_name: X-Device}}]
    plugins:
      - {name: rate-limiting, config: {minute: 3, hour: 100, limit_by: consumer}}
`), "shop")
	if err != nil {
		t.Fatal(err)
	}
	for i := range plan.Rules {
		plan.Rules[i].ID = plan.Rules[i].Name
	}
	cfg, key := decisiontest.With(t, plan.Rules)
	cfg.Headers = rlheaders.Kong
	up, hits := upstream(t)
	px := proxyFor(t, cfg, key, up, func(pc *Config) {
		pc.IdentityHeader = "apikey"
		pc.HeaderDescriptors = []HeaderDescriptor{{Key: "x-device", Header: "X-Device"}}
	})
	get := func(path, apikey, device string) *http.Response {
		req, _ := http.NewRequest("GET", px.URL+path, nil)
		req.Header.Set("apikey", apikey)
		req.Header.Set("X-Device", device)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i, path := range []string{"/orders", "/v2/orders/7", "/orders?page=2"} {
		if resp := get(path, "alice-key", "d1"); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining-Minute") != string(rune('2'-i)) {
			t.Fatalf("alice's request %d to %s: %d, remaining %q", i, path, resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining-Minute"))
		}
	}
	resp := get("/v2/orders", "alice-key", "d1")
	if resp.StatusCode != 429 || resp.Header.Get("X-RateLimit-Limit-Minute") != "3" || resp.Header.Get("X-RateLimit-Limit-Hour") != "100" ||
		resp.Header.Get("RateLimit-Remaining") != "0" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("alice's fourth over both paths: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := get("/orders", "bob-key", "d1"); resp.StatusCode != 200 {
		t.Fatalf("bob, a consumer of his own: %d", resp.StatusCode)
	}
	// /login has its own limit, per device, in place of the service's:
	// alice, out of orders, may log in once.
	if resp := get("/login", "alice-key", "d1"); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Limit-Minute") != "1" {
		t.Fatalf("alice's login: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := get("/login", "bob-key", "d1"); resp.StatusCode != 429 {
		t.Fatalf("a second login from device d1: %d", resp.StatusCode)
	}
	if hits.Load() != 3+1+1 {
		t.Fatalf("upstream reached %d times, want 5", hits.Load())
	}
}
