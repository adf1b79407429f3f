// Package httpporttest serves HTTP check routes for tests, on each kind of
// server the decider has: net/http alone, and the split port of
// httpport.Server (fasthttp).
package httpporttest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/httpport"
)

// Served is a server of check routes for a test: its base URL and a
// client.
type Served struct {
	URL    string
	Client *http.Client
}

// Kinds are the ways check routes are served: by httpport.Handler on
// net/http, and by httpport.Server (fasthttp) as the decider serves them.
// Each test of a route runs against both.
var Kinds = []string{"net/http", "fasthttp"}

// Routes are the routes of a protocol over a (its package's Routes).
type Routes func(a *httpport.API) []httpport.Route

// Serve serves routes of svc the given way until the test ends, with
// next the handler of net/http (on its own, or behind httpport.Server).
func Serve(t *testing.T, kind string, svc decision.Service, routes Routes, next http.Handler) Served {
	t.Helper()
	if kind == "net/http" {
		std := httptest.NewServer(next)
		t.Cleanup(std.Close)
		return Served{std.URL, std.Client()}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := httpport.NewAPI(svc)
	fast := httpport.NewServer(a, routes(a), next)
	done := make(chan error, 1)
	go func() { done <- fast.Serve(ln) }()
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := fast.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return Served{"http://" + ln.Addr().String(), client}
}

// Each runs f against routes of mk's service on each kind of server, with
// its check key.
func Each(t *testing.T, mk func(testing.TB) (decision.Service, string), routes Routes, f func(t *testing.T, srv Served, key string)) {
	for _, kind := range Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			svc, key := mk(t)
			f(t, Serve(t, kind, svc, routes, httpport.Handler(routes(httpport.NewAPI(svc)))), key)
		})
	}
}

// Post posts body to path with key as the bearer and returns the answer
// and its JSON body.
func Post(t *testing.T, srv Served, path, key, body string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := srv.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", path, raw, err)
	}
	return resp, m
}
