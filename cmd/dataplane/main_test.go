package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/controlplane"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A decider started against a control plane and Redis becomes ready with
// the tenant's config, enforces it through Redis, and reports its version.
func TestDeciderEndToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := pgstore.New(pgtest.Pool(t))
	tn, err := store.CreateTenant(ctx, "operator", policy.Tenant{Slug: "acme", Name: "Acme"})
	if err != nil {
		t.Fatal(err)
	}
	tiers, _ := store.ListTiers(ctx, tn.ID)
	rule := policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Hour}}
	if _, _, err := store.CreateRule(ctx, "operator", tn.ID, tiers[0].ID, rule); err != nil {
		t.Fatal(err)
	}
	checkKey, _, _ := store.CreateKey(ctx, "operator", tn.ID, policy.KeyCheck, "app")
	_, version, _ := store.GetTenant(ctx, tn.ID)
	cp := httptest.NewServer(controlplane.NewHandler(controlplane.Config{Store: store, DeciderKey: "dk", WatchRecheck: time.Minute}))
	defer func() { cp.CloseClientConnections(); cp.Close() }()
	rc, prefix := redistest.Client(t)

	env := map[string]string{"SLUICE_DECIDER_KEY": "dk", "SLUICE_REDIS_PREFIX": prefix}
	args := []string{"-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-control-plane", cp.URL, "-redis-url", "redis://" + redistest.Addr(t),
		"-state-file", filepath.Join(t.TempDir(), "snapshot.pb")}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, func(k string) string { return env[k] }, pw, io.Discard); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no banner: %v", err)
	}
	base := strings.TrimSpace(line[strings.Index(line, "http://"):])
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	var ready struct {
		Ready bool
		Info  struct {
			ConfigVersions map[string]int64 `json:"config_versions"`
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !ready.Ready {
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
		if resp, err := http.Get(base + "/readyz"); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&ready)
			resp.Body.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ready.Info.ConfigVersions[tn.ID] != version {
		t.Fatalf("/readyz reports %v, want version %d of %s", ready.Info.ConfigVersions, version, tn.ID)
	}

	var codes []int
	for range 4 {
		req, _ := http.NewRequest("POST", base+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"alice"}}`))
		req.Header.Set("Authorization", "Bearer "+checkKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if want := []int{200, 200, 200, 429}; !equal(codes, want) {
		t.Fatalf("statuses %v, want %v", codes, want)
	}
	// Decided in Redis, not in the decider's memory: the counter is there.
	if keys, err := rc.Keys(ctx, prefix+"*").Result(); err != nil || len(keys) != 1 {
		t.Fatalf("counter keys in Redis under %s: %v (%v)", prefix, keys, err)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sluice_config_version{tenant="` + tn.ID + `"}`, `sluice_decisions_total{outcome="allowed",tenant="acme"} 3`,
		`sluice_decisions_total{outcome="rejected",tenant="acme"} 1`, `sluice_breaker_state 0`, `sluice_decision_seconds_count 4`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
