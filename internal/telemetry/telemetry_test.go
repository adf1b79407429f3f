package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

func TestMountAndEngineMetrics(t *testing.T) {
	t.Parallel()
	e := limit.NewEngine(limit.EngineConfig{Shards: 1, MaxKeys: 10})
	l := limit.MustCompile(policy.Params{Algorithm: policy.FixedWindow, Limit: 1, Window: time.Minute})
	for i := range 25 {
		e.Allow(fmt.Sprintf("k%d", i), l, limit.Args{Now: 1, Cost: 1})
	}
	reg := NewRegistry()
	reg.MustRegister(NewEngineCollector(e))
	var ready Readiness
	mux := http.NewServeMux()
	Mount(mux, reg, ready.Ready, nil)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, _ := get("/readyz"); code != 503 {
		t.Fatalf("readyz before the first config: %d, want 503", code)
	}
	if code, body := get("/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/ on the admin listener: %d %.80q", code, body)
	}
	if code, body := get("/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("the goroutine profile: %d %.80q", code, body)
	}
	ready.SetReady(true)
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("readyz when ready: %d", code)
	}
	_, body := get("/metrics")
	for _, want := range []string{"sluice_local_engine_keys 10", "sluice_local_engine_evictions_total 15"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// A probe answers its check's last result, asking it once per interval.
func TestProbe(t *testing.T) {
	t.Parallel()
	calls := 0
	var fail error
	p := NewProbe(func(context.Context) error { calls++; return fail }, time.Hour)
	first, second := p.OK(), p.OK()
	if !first || !second || calls != 1 {
		t.Fatalf("healthy: %d checks for two asks within the interval, want 1", calls)
	}
	fail = errors.New("down")
	q := NewProbe(func(context.Context) error { calls++; return fail }, time.Nanosecond)
	if q.OK() {
		t.Fatal("a failing check reported OK")
	}
	fail = nil
	if !q.OK() {
		t.Fatal("not OK again once the check passes, past the interval")
	}
}
