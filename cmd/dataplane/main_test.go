package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/controlplane"
	"github.com/sluicehq/sluice/internal/dataplane"
	"github.com/sluicehq/sluice/internal/events/eventstest"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/kafkatest"
	"github.com/sluicehq/sluice/internal/testkit/logtest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
	"github.com/sluicehq/sluice/internal/testkit/tlstest"
)

// A decider started against a control plane and Redis becomes ready with
// the tenant's config, enforces it through Redis, and reports its version.
func TestDeciderEndToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tn, version, checkKey, cpURL := acme(t, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Hour}})
	rc, prefix := redistest.Client(t)

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "from upstream") }))
	defer upstream.Close()

	topic := kafkatest.Topic(t)
	broker := kafkatest.Start(t, 1, []string{topic})

	env := map[string]string{"SLUICE_DECIDER_KEY": "dk", "SLUICE_REDIS_PREFIX": prefix, "SLUICE_PROXY_KEY": checkKey,
		"KAFKA_BROKERS": strings.Join(broker.Addrs(), ","), "SLUICE_EVENTS_TOPIC": topic}
	// The test counts every decision exactly in Redis; a decision the
	// machine's load keeps from Redis past the default 50 ms is answered by
	// the overload policy instead (honestly, but not exactly): this test
	// waits for Redis, the overload tests test the budget.
	args := []string{"-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-control-plane", cpURL, "-redis-url", "redis://" + redistest.Addr(t),
		"-budget", "10s",
		"-state-file", filepath.Join(t.TempDir(), "snapshot.pb"), "-upstream", upstream.URL, "-proxy-addr", "127.0.0.1:0",
		"-proxy-protocol", "192.0.2.0/24", // a balancer elsewhere: this test's direct connections are served as they come
		"-cors-origins", "http://console.example"}
	addrs, done := startDecider(t, ctx, args, env)
	base, proxy := addrs.base, addrs.proxy

	ready := waitReady(t, addrs.admin)
	if ready[tn.ID] != version {
		t.Fatalf("/readyz reports %v, want version %d of %s", ready, version, tn.ID)
	}

	var codes []int
	for range 4 {
		codes = append(codes, check(t, base, checkKey, "alice").StatusCode)
	}
	if want := []int{200, 200, 200, 429}; !slices.Equal(codes, want) {
		t.Fatalf("statuses %v, want %v", codes, want)
	}
	// Decided in Redis, not in the decider's memory: the counter is there.
	if keys, err := rc.Keys(ctx, prefix+"*").Result(); err != nil || len(keys) != 1 {
		t.Fatalf("counter keys in Redis under %s: %v (%v)", prefix, keys, err)
	}
	// The reverse proxy enforces the same tenant's rules (the client is its
	// IP here) in front of the upstream.
	codes = nil
	for range 4 {
		resp, err := http.Get(proxy + "/anything")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && string(b) != "from upstream" {
			t.Fatalf("proxied answer %q", b)
		}
		codes = append(codes, resp.StatusCode)
	}
	if want := []int{200, 200, 200, 429}; !slices.Equal(codes, want) {
		t.Fatalf("through the proxy: statuses %v, want %v", codes, want)
	}
	// The console's origin may call the check API from a browser.
	for _, path := range []string{"/v1/check", "/v1/reset"} {
		pre, _ := http.NewRequest(http.MethodOptions, base+path, nil)
		pre.Header.Set("Origin", "http://console.example")
		pre.Header.Set("Access-Control-Request-Method", "POST")
		if resp, err := http.DefaultClient.Do(pre); err != nil || resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "http://console.example" {
			t.Fatalf("CORS preflight of %s: %v %v", path, resp, err)
		}
	}
	resp, err := http.Get(addrs.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sluice_config_version{tenant="` + tn.ID + `"}`, `sluice_decisions_total{outcome="allowed",tenant="acme"} 6`,
		`sluice_decisions_total{outcome="rejected",tenant="acme"} 2`,
		`sluice_rule_decisions_total{outcome="allowed",rule="per-client",tenant="acme",tier="default"} 6`,
		`sluice_rule_decisions_total{outcome="rejected",rule="per-client",tenant="acme",tier="default"} 2`,
		`sluice_rule_near_limit_total{rule="per-client",tenant="acme",tier="default"} 2`, `sluice_breaker_state 0`, `sluice_engine_errors_total 0`, `sluice_config_refused_total 0`, `sluice_redis_read_spins_total `, `sluice_redis_read_spins_missed_total `} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The decisions that reached Redis went in pipelines, each of at least one.
	pipes, calls := metricValue(t, body, "sluice_redis_pipelines_total"), metricValue(t, body, "sluice_redis_pipelined_calls_total")
	if pipes < 1 || calls < pipes || calls > 8 {
		t.Errorf("%v pipelines carried %v calls, for 8 decisions", pipes, calls)
	}
	// A check still arriving when the decider is told to stop is decided,
	// and counted in the events: the server has read its headers (it
	// invited the body) when the stop comes.
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := `{"descriptors":{"client_id":"bob"}}`
	if _, err := io.WriteString(conn, "POST /v1/check HTTP/1.1\r\nHost: decider\r\nAuthorization: Bearer "+checkKey+
		"\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: "+strconv.Itoa(len(check))+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("no 100 Continue: %v %v", resp, err)
	}
	cancel()
	if _, err := io.WriteString(conn, check); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a check in flight at the stop: %v %v", resp, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop")
	}
	// Stopped, the decider has sent its last events: the two rejections,
	// and the counts of all nine decisions, which only its last flush
	// carries (a delta's interval is 10 s).
	kc, err := kafka.DialLeader(context.Background(), "tcp", broker.Addrs()[0], topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	end, err := kc.ReadLastOffset()
	kc.Close()
	// Two rejections and at least one delta; a slow run may have sent a
	// periodic delta before the last (its interval is 10 s): the counts
	// are what must add up, not how many messages carried them.
	if err != nil || end < 3 {
		t.Fatalf("the topic ends at %d (%v) when run returns, want at least 3 messages", end, err)
	}
	ta := eventstest.Read(t, broker.Addrs(), topic, func(ta *eventstest.Tally) bool { return ta.Messages == end })
	if len(ta.Rejections) != 2 || ta.Allowed != 7 || ta.Rejected != 2 {
		t.Fatalf("events: %d rejections, deltas of %d allowed and %d rejected; want 2, 7, 2", len(ta.Rejections), ta.Allowed, ta.Rejected)
	}
}

// acme creates the tenant acme with rule in its default tier and a check
// key, and serves it from a control plane (decider key "dk") until the
// test ends; it returns the tenant, its config version, the check key and
// the control plane's URL.
func acme(t *testing.T, rule policy.Rule) (tn policy.Tenant, version int64, checkKey, cpURL string) {
	t.Helper()
	tn, version, checkKey, cpURL, _ = acmeOn(t, rule)
	return tn, version, checkKey, cpURL
}

// acmeOn is acme that also returns the control plane's store.
func acmeOn(t *testing.T, rule policy.Rule) (tn policy.Tenant, version int64, checkKey, cpURL string, store *pgstore.Store) {
	t.Helper()
	return acmeOnPool(t, pgtest.Pool(t), rule)
}

// acmeOnPool is acmeOn on the database of pool.
func acmeOnPool(t *testing.T, pool *pgxpool.Pool, rule policy.Rule) (tn policy.Tenant, version int64, checkKey, cpURL string, store *pgstore.Store) {
	t.Helper()
	ctx := context.Background()
	store = pgstore.New(pool)
	tn, err := store.CreateTenant(ctx, "operator", policy.Tenant{Slug: "acme", Name: "Acme"})
	if err != nil {
		t.Fatal(err)
	}
	tiers, _ := store.ListTiers(ctx, tn.ID)
	if _, _, err := store.CreateRule(ctx, "operator", tn.ID, tiers[0].ID, rule); err != nil {
		t.Fatal(err)
	}
	if checkKey, _, err = store.CreateKey(ctx, "operator", tn.ID, policy.KeyCheck, "app"); err != nil {
		t.Fatal(err)
	}
	_, version, _ = store.GetTenant(ctx, tn.ID)
	cp := httptest.NewServer(controlplane.NewHandler(controlplane.HandlerConfig{DeciderKey: "dk"}.OnPostgres(store, time.Minute)))
	t.Cleanup(func() { cp.CloseClientConnections(); cp.Close() })
	return tn, version, checkKey, cp.URL, store
}

// deciderAddrs are the addresses a decider prints: its HTTP port, its
// proxy ("" without -upstream), its gRPC port ("" with -grpc-addr off) and
// its admin listener (metrics, detailed health).
type deciderAddrs struct{ base, proxy, grpc, admin string }

// startDecider runs the decider with args and env until ctx ends, and
// returns the addresses it prints, once it has printed them, and where
// run's error comes.
func startDecider(t *testing.T, ctx context.Context, args []string, env map[string]string) (deciderAddrs, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	if !slices.Contains(args, "-admin-addr") {
		args = append(args, "-admin-addr", "127.0.0.1:0")
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		errc <- run(ctx, args, func(k string) string { return env[k] }, pw, io.Discard)
		pw.Close()
	}()
	// The decider writes into the test's directories (its state file, its
	// spool) until it has stopped: the test's directories go after that.
	// A test ends the decider by cancelling ctx, which happens first.
	t.Cleanup(func() {
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
		}
	})
	lines := bufio.NewReader(pr)
	proxied := slices.Contains(args, "-upstream")
	withGRPC := !slices.Contains(args, "off")
	var a deciderAddrs
	for a.base == "" || (proxied && a.proxy == "") || (withGRPC && a.grpc == "") || a.admin == "" {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("no banner: %v", err)
		}
		fields := strings.Fields(line)
		url := strings.Fields(line[max(strings.Index(line, "http"), 0):])[0]
		switch {
		case strings.HasPrefix(line, "decider listening"):
			a.base = url
		case strings.HasPrefix(line, "proxying"):
			a.proxy = url
		case strings.HasPrefix(line, "admin"):
			a.admin = url
		case strings.HasPrefix(line, "gRPC"):
			a.grpc = fields[len(fields)-1]
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	return a, errc
}

// check asks the decider at base for a decision on client, and returns
// its answer (the body closed).
func check(t *testing.T, base, key, client string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"`+client+`"}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// waitReady polls the decider at base until /readyz says it is ready, and
// returns the config versions it reports.
func waitReady(t *testing.T, base string) map[string]int64 {
	t.Helper()
	return waitReadyOn(t, http.DefaultClient, base)
}

// waitReadyOn is waitReady through client.
func waitReadyOn(t *testing.T, client *http.Client, base string) map[string]int64 {
	t.Helper()
	return waitReadyWithin(t, client, base, 20*time.Second)
}

// waitReadyWithin is waitReadyOn with a budget of its own.
func waitReadyWithin(t *testing.T, client *http.Client, base string, budget time.Duration) map[string]int64 {
	t.Helper()
	var ready struct {
		Ready bool
		Info  struct {
			ConfigVersions map[string]int64 `json:"config_versions"`
		}
	}
	deadline := time.Now().Add(budget)
	for !ready.Ready {
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
		if resp, err := client.Get(base + "/readyz"); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&ready)
			resp.Body.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ready.Info.ConfigVersions
}

// metricValue is the value of the unlabelled metric name in a Prometheus
// text exposition.
func metricValue(t *testing.T, body []byte, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("metrics lack %s", name)
	return 0
}

// What a decider counted locally (a rule's sync interval) reaches Redis
// when it stops, not one interval later or never: a decider started after
// it sees every admission.
func TestDeciderSendsLocalCountsWhenItStops(t *testing.T) {
	ctx := context.Background()
	_, _, checkKey, cpURL := acme(t, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true, Sync: time.Minute,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 100, Window: time.Hour}})
	_, prefix := redistest.Client(t)
	// A key's first decision waits for a reconciliation: within the
	// budget however loaded the machine, or it would be answered by the
	// rule's failure mode (open, nothing counted: 100 remaining).
	env := map[string]string{"SLUICE_DECIDER_KEY": "dk", "SLUICE_REDIS_PREFIX": prefix, "SLUICE_DECISION_BUDGET": "5s"}
	args := []string{"-addr", "127.0.0.1:0", "-grpc-addr", "off", "-control-plane", cpURL, "-redis-url", "redis://" + redistest.Addr(t),
		"-state-file", filepath.Join(t.TempDir(), "snapshot.pb")}

	remaining := func(base string) []string {
		var out []string
		for range 5 {
			out = append(out, check(t, base, checkKey, "alice").Header.Get("X-RateLimit-Remaining"))
		}
		return out
	}
	for i, want := range [][]string{{"99", "98", "97", "96", "95"}, {"94", "93", "92", "91", "90"}} {
		dctx, stop := context.WithCancel(ctx)
		addrs, done := startDecider(t, dctx, args, env)
		base := addrs.base
		waitReady(t, base)
		if got := remaining(base); !slices.Equal(got, want) {
			t.Fatalf("decider %d: remaining %v, want %v", i+1, got, want)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("decider %d: %v", i+1, err)
		}
	}
}

// Events a decider could not send while Kafka was down stay in its spool
// (by default beside its state file) through a restart, and the next run
// sends them: none is lost, not even the last counts of the first run.
func TestDeciderSpoolsEventsThroughKafkaOutageAndRestart(t *testing.T) {
	ctx := context.Background()
	_, _, checkKey, cpURL := acme(t, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Hour}})
	topic := kafkatest.Topic(t)
	broker := kafkatest.Start(t, 1, []string{topic})
	broker.Close()
	env := map[string]string{"SLUICE_DECIDER_KEY": "dk", "KAFKA_BROKERS": strings.Join(broker.Addrs(), ","), "SLUICE_EVENTS_TOPIC": topic}
	stateDir := t.TempDir()
	args := []string{"-addr", "127.0.0.1:0", "-grpc-addr", "off", "-control-plane", cpURL, "-state-file", filepath.Join(stateDir, "snapshot.pb")}

	dctx, stop := context.WithCancel(ctx)
	addrs, done := startDecider(t, dctx, args, env)
	waitReady(t, addrs.base)
	var codes []int
	for range 4 {
		codes = append(codes, check(t, addrs.base, checkKey, "alice").StatusCode)
	}
	if want := []int{200, 200, 200, 429}; !slices.Equal(codes, want) {
		t.Fatalf("statuses %v, want %v", codes, want)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if segs, _ := filepath.Glob(filepath.Join(stateDir, "events-spool", "*.seg")); len(segs) == 0 {
		t.Fatal("nothing spooled beside the state file while Kafka was down")
	}

	broker.Restart(t)
	dctx, stop = context.WithCancel(ctx)
	defer stop()
	addrs, _ = startDecider(t, dctx, args, env)
	waitReady(t, addrs.base)
	ta := eventstest.Read(t, broker.Addrs(), topic, func(ta *eventstest.Tally) bool {
		return len(ta.Rejections) >= 1 && ta.Allowed >= 3 && ta.Rejected >= 1
	})
	if len(ta.Rejections) != 1 || ta.Allowed != 3 || ta.Rejected != 1 || ta.Rejections[0].ClientKey != "alice" {
		t.Fatalf("events after the restart: %d rejections, %d allowed, %d rejected; want 1, 3, 1", len(ta.Rejections), ta.Allowed, ta.Rejected)
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, a decider exports a span per
// decision over OTLP/HTTP, in the trace of the request (its traceparent),
// named for the service, by the time it has stopped.
func TestDeciderExportsTraces(t *testing.T) {
	_, _, checkKey, cpURL := acme(t, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Hour}})
	exported := make(chan *coltracepb.ExportTraceServiceRequest, 16)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || r.Header.Get("X-Api-Key") != "k1" || proto.Unmarshal(body, &req) != nil {
			t.Errorf("collector: %s %s with %d bytes", r.Method, r.URL.Path, len(body))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		exported <- &req
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	env := map[string]string{"SLUICE_DECIDER_KEY": "dk", "OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_EXPORTER_OTLP_HEADERS": "X-Api-Key=k1"}
	args := []string{"-addr", "127.0.0.1:0", "-grpc-addr", "off", "-control-plane", cpURL, "-state-file", filepath.Join(t.TempDir(), "snapshot.pb")}
	ctx, cancel := context.WithCancel(context.Background())
	a, done := startDecider(t, ctx, args, env)
	waitReady(t, a.base)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest(http.MethodPost, a.base+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"alice"}}`))
	req.Header.Set("Authorization", "Bearer "+checkKey)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case req := <-exported:
		rs := req.GetResourceSpans()
		if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
			t.Fatalf("exported %v, want one span", req)
		}
		span := rs[0].GetScopeSpans()[0].GetSpans()[0]
		if span.GetName() != "sluice.decide" || fmt.Sprintf("%x", span.GetTraceId()) != traceID {
			t.Fatalf("span %q in trace %x", span.GetName(), span.GetTraceId())
		}
		if !strings.Contains(rs[0].GetResource().String(), "sluice-dataplane") {
			t.Fatalf("resource %v does not name the service", rs[0].GetResource())
		}
	default:
		t.Fatal("nothing exported by the time the decider stopped")
	}
}

// A decider on a Redis Cluster (-redis-cluster: one seed node, the others
// as addr parameters) enforces its rules across the cluster's nodes, each
// client's counter on the node owning its slot; a client of one node
// alone would be answered MOVED for most keys. On Sentinels
// (-redis-sentinel) it decides on the master they name.
func TestDeciderOnRedisTopologies(t *testing.T) {
	_, _, checkKey, cpURL := acme(t, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Hour}})
	// decide runs a decider on url with flag, makes 12 clients' checks
	// until each is rejected, and returns the counter keys on each server.
	decide := func(t *testing.T, url, flag string, servers []*redistest.Server) []int {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		args := []string{"-addr", "127.0.0.1:0", "-grpc-addr", "off", "-control-plane", cpURL, "-redis-url", url, flag,
			"-state-file", filepath.Join(t.TempDir(), "snapshot.pb")}
		addrs, done := startDecider(t, ctx, args, map[string]string{"SLUICE_DECIDER_KEY": "dk"})
		waitReady(t, addrs.base)
		for i := range 12 {
			var codes []int
			for range 3 {
				codes = append(codes, check(t, addrs.base, checkKey, "client-"+strconv.Itoa(i)).StatusCode)
			}
			if want := []int{200, 200, 429}; !slices.Equal(codes, want) {
				t.Fatalf("client-%d: statuses %v, want %v", i, codes, want)
			}
		}
		var perServer []int
		for _, s := range servers {
			n := redis.NewClient(&redis.Options{Addr: s.Addr})
			keys, err := n.Keys(ctx, "*").Result()
			n.Close()
			if err != nil {
				t.Fatal(err)
			}
			perServer = append(perServer, len(keys))
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
		return perServer
	}
	t.Run("cluster", func(t *testing.T) {
		cluster := redistest.StartCluster(t)
		keys := decide(t, "redis://"+cluster.Addrs[0]+"?addr="+cluster.Addrs[1]+"&addr="+cluster.Addrs[2], "-redis-cluster", cluster.Servers)
		nodes := 0
		for _, n := range keys {
			if n > 0 {
				nodes++
			}
		}
		if keys[0]+keys[1]+keys[2] != 12 || nodes < 2 {
			t.Fatalf("counter keys per node %v, want 12 spread over the nodes", keys)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		master := redistest.StartServer(t)
		sentinel := redistest.StartSentinel(t, "sluice", master)
		if keys := decide(t, "redis://"+sentinel.Addr+"?master_name=sluice", "-redis-sentinel", []*redistest.Server{master}); keys[0] != 12 {
			t.Fatalf("%d counter keys on the master, want 12", keys[0])
		}
	})
}

// A malformed REDIS_URL is refused without its password showing.
func TestMalformedRedisURLKeepsItsPassword(t *testing.T) {
	for _, args := range [][]string{
		{"-redis-url", "redis://u:s3cretpw@127.0.0.1:bad"},
		{"-redis-url", "redis://u:s3cretpw@127.0.0.1:6379/%zz"},
		{"-redis-url", "redis://u:s3cretpw@127.0.0.1:bad?addr=127.0.0.1:7001", "-redis-cluster"},
	} {
		var out logtest.Buffer // the config syncer may still be logging as run returns
		args = append(args, "-addr", "127.0.0.1:0", "-grpc-addr", "off", "-state-file", filepath.Join(t.TempDir(), "s.pb"))
		err := run(context.Background(), args, func(string) string { return "" }, &out, &out)
		if err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
			t.Fatalf("%v: %v, want a REDIS_URL error", args, err)
		}
		if strings.Contains(err.Error()+out.String(), "s3cretpw") {
			t.Fatalf("%v: the password shows: %v\n%s", args, err, out.String())
		}
	}
}

// The gRPC port as the binary wires it: health SERVING once ready, the
// connection age limit sending clients away, and a stop that neither
// waits for a health Watch that never ends nor keeps it SERVING.
func TestDeciderGRPCPort(t *testing.T) {
	_, _, _, cpURL := acme(t, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Hour}})
	start := func(ctx context.Context, extra ...string) (deciderAddrs, <-chan error) {
		args := append([]string{"-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-control-plane", cpURL,
			"-state-file", filepath.Join(t.TempDir(), "snapshot.pb")}, extra...)
		a, done := startDecider(t, ctx, args, map[string]string{"SLUICE_DECIDER_KEY": "dk"})
		waitReady(t, a.base)
		return a, done
	}
	dial := func(addr string) healthpb.HealthClient {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return healthpb.NewHealthClient(conn)
	}

	t.Run("max connection age", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		a, done := start(ctx, "-grpc-max-connection-age", "200ms", "-grpc-max-connection-age-grace", "1s")
		defer func() { cancel(); <-done }() // before the test's directories go
		if res, err := dial(a.grpc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health once ready: %v %v", res, err)
		}
		c, err := net.Dial("tcp", a.grpc)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte(http2.ClientPreface))
		fr := http2.NewFramer(c, bufio.NewReader(c))
		_ = fr.WriteSettings()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("no GOAWAY from a connection past its age: %v", err)
			}
			if _, ok := f.(*http2.GoAwayFrame); ok {
				break
			}
			if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		}
	})

	t.Run("mutual TLS", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		ca := tlstest.NewCA(t)
		cert, key, caFile := ca.ServerFiles(t, t.TempDir(), 1)
		a, done := start(ctx, "-grpc-tls-cert", cert, "-grpc-tls-key", key, "-grpc-tls-client-ca", caFile)
		defer func() { cancel(); <-done }()
		check := func(creds credentials.TransportCredentials) error {
			conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(creds))
			if err != nil {
				return err
			}
			defer conn.Close()
			cctx, stop := context.WithTimeout(ctx, 5*time.Second)
			defer stop()
			res, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
			if err == nil && res.Status != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("status %v", res.Status)
			}
			return err
		}
		client := ca.Client(t)
		if err := check(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client}})); err != nil {
			t.Fatalf("a client with a certificate the CA signed: %v", err)
		}
		if err := check(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool()})); err == nil {
			t.Fatal("a client without a certificate got an answer")
		}
		if err := check(insecure.NewCredentials()); err == nil {
			t.Fatal("a plaintext client got an answer from a TLS port")
		}
		// A key that is not there stops the decider at start, saying so.
		err := run(context.Background(), []string{"-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-grpc-tls-cert", cert,
			"-grpc-tls-key", filepath.Join(t.TempDir(), "none.pem"), "-state-file", filepath.Join(t.TempDir(), "s.pb")},
			func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "grpc: tls") {
			t.Fatalf("a missing key: %v, want a grpc: tls error", err)
		}
	})

	t.Run("stop with a Watch open", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, done := start(ctx)
		watch, err := dial(a.grpc).Watch(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := watch.Recv(); err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("watched %v %v, want SERVING", res, err)
		}
		cancel()
		if res, err := watch.Recv(); err != nil || res.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("watched %v %v once stopping, want NOT_SERVING", res, err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run: %v", err)
			}
		case <-time.After(dataplane.GRPCStopGrace + 10*time.Second):
			t.Fatal("the decider did not stop while a health Watch was open")
		}
	})
}

// With -tls-cert, -tls-key and -tls-client-ca the HTTP port serves only
// clients with a certificate the CA signed, over TLS: checks over HTTP/1.1
// (fasthttp's side of the port) and over the HTTP/2 that ALPN chose
// (net/http's, here Connect's gRPC), and the routes fasthttp hands to
// net/http (/metrics). Without a certificate, or in plaintext, nothing is
// answered.
func TestDeciderHTTPS(t *testing.T) {
	_, _, checkKey, cpURL := acme(t, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Hour}})
	ctx, cancel := context.WithCancel(context.Background())
	ca := tlstest.NewCA(t)
	cert, key, caFile := ca.ServerFiles(t, t.TempDir(), 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "from upstream, forwarded as "+r.Header.Get("X-Forwarded-Proto"))
	}))
	defer upstream.Close()
	a, done := startDecider(t, ctx, []string{"-addr", "127.0.0.1:0", "-grpc-addr", "off", "-control-plane", cpURL,
		"-state-file", filepath.Join(t.TempDir(), "snapshot.pb"), "-tls-cert", cert, "-tls-key", key, "-tls-client-ca", caFile,
		"-upstream", upstream.URL, "-proxy-addr", "127.0.0.1:0", "-proxy-tls-cert", cert, "-proxy-tls-key", key},
		map[string]string{"SLUICE_DECIDER_KEY": "dk", "SLUICE_PROXY_KEY": checkKey})
	defer func() { cancel(); <-done }()
	if !strings.HasPrefix(a.base, "https://") {
		t.Fatalf("banner says %s, want an https:// URL", a.base)
	}
	client := func(withCert, h2 bool) *http.Client {
		cfg := &tls.Config{RootCAs: ca.Pool()}
		if withCert {
			cfg.Certificates = []tls.Certificate{ca.Client(t)}
		}
		tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	h1, h2 := client(true, false), client(true, true)
	waitReadyOn(t, h1, a.base)

	for i, want := range []int{200, 200, 429} {
		req, _ := http.NewRequest("POST", a.base+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"alice"}}`))
		req.Header.Set("Authorization", "Bearer "+checkKey)
		resp, err := h1.Do(req)
		if err != nil {
			t.Fatalf("check %d over HTTP/1.1 on TLS: %v", i+1, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || resp.ProtoMajor != 1 {
			t.Fatalf("check %d: %s %s, want %d over HTTP/1.1", i+1, resp.Proto, resp.Status, want)
		}
	}
	creq := connect.NewRequest(&sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "bob"}}})
	creq.Header().Set("Authorization", "Bearer "+checkKey)
	if res, err := sluicev1connect.NewDecisionServiceClient(h2, a.base, connect.WithGRPC()).Check(ctx, creq); err != nil || !res.Msg.Allowed {
		t.Fatalf("Check over gRPC on TLS: %v %v", res, err)
	}
	resp, err := h1.Get(a.base + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/readyz over HTTP/1.1 on TLS: %v %v", resp, err)
	}
	resp.Body.Close()

	// The proxy's port serves TLS of its own, without client certificates
	// (the client here is its IP), and tells the upstream so.
	if !strings.HasPrefix(a.proxy, "https://") {
		t.Fatalf("the proxy's banner says %s, want an https:// URL", a.proxy)
	}
	for i, want := range []int{200, 200, 429} {
		resp, err := client(false, true).Get(a.proxy + "/anything")
		if err != nil {
			t.Fatalf("request %d through the proxy on TLS: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || resp.ProtoMajor != 2 || (want == 200 && string(b) != "from upstream, forwarded as https") {
			t.Fatalf("request %d through the proxy: %s %s %q, want %d over HTTP/2", i+1, resp.Proto, resp.Status, b, want)
		}
	}

	if resp, err := client(false, false).Get(a.base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got %s", resp.Status)
	}
	if resp, err := http.Get("http://" + strings.TrimPrefix(a.base, "https://") + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("a plaintext request was answered by a TLS port")
		}
	}
}

// -shadow-mode: the decider rejects nothing its rules would reject (what
// they would have done goes to the analytics as shadow would-rejects,
// decide's TestShadowAllRejectsNothing); without it the same checks are
// rejected from the third.
func TestDeciderShadowMode(t *testing.T) {
	_, _, checkKey, cpURL := acme(t, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Hour}})
	for _, tc := range []struct {
		flag string
		want []int
	}{{"-shadow-mode", []int{200, 200, 200, 200}}, {"-shadow-mode=false", []int{200, 200, 429, 429}}} {
		ctx, cancel := context.WithCancel(context.Background())
		args := []string{"-addr", "127.0.0.1:0", "-grpc-addr", "off", "-control-plane", cpURL, tc.flag,
			"-state-file", filepath.Join(t.TempDir(), "snapshot.pb")}
		a, done := startDecider(t, ctx, args, map[string]string{"SLUICE_DECIDER_KEY": "dk"})
		waitReady(t, a.base)
		var codes []int
		for range 4 {
			codes = append(codes, check(t, a.base, checkKey, "alice").StatusCode)
		}
		// The rule's metrics tell the would-rejects from the rejections.
		resp, err := http.Get(a.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(codes, tc.want) {
			t.Fatalf("%s: statuses %v, want %v", tc.flag, codes, tc.want)
		}
		outcome := map[string]string{"-shadow-mode": "shadow_rejected", "-shadow-mode=false": "rejected"}[tc.flag]
		want := `sluice_rule_decisions_total{outcome="` + outcome + `",rule="per-client",tenant="acme",tier="default"} 2`
		if !strings.Contains(string(body), want) {
			t.Fatalf("%s: metrics lack %s", tc.flag, want)
		}
	}
}

// The reverse proxy's identity and request settings are checked at start: a decider
// told half of them, or nonsense, does not start.
func TestProxyIdentitySettingsAreChecked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-identity-jwt-claim", "sub"}, "go together"},
		{[]string{"-identity-jwks-url", "https://idp.example/jwks.json"}, "go together"},
		{[]string{"-identity-jwt-claim", "sub", "-identity-jwks-url", "ftp://idp.example/jwks.json"}, "https://"},
		{[]string{"-proxy-protocol", "10.0.0.0/33"}, "proxy-protocol"},
		{[]string{"-identity-client-cert"}, "-proxy-tls-client-ca"},
		{[]string{"-descriptor-headers", "ip=X-Real-Ip"}, "-descriptor-headers"},
		{[]string{"-upstream-timeout", "-1s"}, "-upstream-timeout"},
		{[]string{"-forward-auth"}, "not both"},
		{[]string{"-forward-auth-deny-status", "500"}, "-forward-auth-deny-status"},
		{[]string{"-tier-header", "X-Tier"}, "-trusted-proxies"},
	} {
		var out logtest.Buffer
		args := append(c.args, "-addr", "127.0.0.1:0", "-grpc-addr", "off", "-state-file", filepath.Join(t.TempDir(), "s.pb"),
			"-upstream", "http://127.0.0.1:1", "-proxy-addr", "127.0.0.1:0")
		env := map[string]string{"SLUICE_PROXY_KEY": "k", "SLUICE_DECIDER_KEY": "dk"}
		err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// A decider given a tenant's check key as its credential (a sidecar of
// that tenant) enforces that tenant alone, and holds nothing of another.
func TestDeciderWithACheckKeyServesItsTenantOnly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tn, version, checkKey, cpURL, store := acmeOn(t, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Hour}})
	other, err := store.CreateTenant(ctx, "operator", policy.Tenant{Slug: "other", Name: "Other"})
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _, err := store.CreateKey(ctx, "operator", other.ID, policy.KeyCheck, "app")
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := startDecider(t, ctx, []string{"-addr", "127.0.0.1:0", "-grpc-addr", "off", "-control-plane", cpURL,
		"-state-file", filepath.Join(t.TempDir(), "snapshot.pb")}, map[string]string{"SLUICE_DECIDER_KEY": checkKey})
	if ready := waitReady(t, addrs.admin); len(ready) != 1 || ready[tn.ID] != version {
		t.Fatalf("/readyz reports %v, want only version %d of %s", ready, version, tn.ID)
	}
	if code := check(t, addrs.base, checkKey, "alice").StatusCode; code != 200 {
		t.Fatalf("its tenant's check: %d", code)
	}
	if code := check(t, addrs.base, otherKey, "alice").StatusCode; code != 401 {
		t.Fatalf("another tenant's check key: %d, want 401 (unknown here)", code)
	}
}

// A tenant with all the overrides it may hold (policy.MaxOverrides: here
// blocks of clients) reaches a decider whole: the first pull carries them,
// and every one of them, the last made included, is enforced.
func TestDeciderServesATenantWithTheMostOverrides(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	tn, _, checkKey, cpURL, store := acmeOnPool(t, pool, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 2, Window: time.Hour}})
	if _, err := pool.Exec(ctx, `INSERT INTO overrides (tenant_id, identifier, block)
		SELECT $1, 'blocked-' || lpad(g::text, 6, '0'), true FROM generate_series(1, $2::int) g`, tn.ID, policy.MaxOverrides-1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.CreateOverride(ctx, "operator", tn.ID, policy.Override{Identifier: "blocked-last", Block: true}); err != nil {
		t.Fatalf("the last override the tenant may hold: %v", err)
	}
	if _, _, err := store.CreateOverride(ctx, "operator", tn.ID, policy.Override{Identifier: "one-too-many", Block: true}); policy.ErrorCode(err) != policy.CodeResourceExhausted {
		t.Fatalf("an override past the bound: %v", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrs, _ := startDecider(t, ctx, []string{"-addr", "127.0.0.1:0", "-grpc-addr", "off", "-control-plane", cpURL,
		"-state-file", filepath.Join(t.TempDir(), "snapshot.pb")}, map[string]string{"SLUICE_DECIDER_KEY": "dk"})
	// 100,000 overrides take a second to pull and compile, ten under the
	// race detector on a busy machine.
	waitReadyWithin(t, http.DefaultClient, addrs.base, 90*time.Second)
	for _, client := range []string{"blocked-000001", "blocked-050000", fmt.Sprintf("blocked-%06d", policy.MaxOverrides-1), "blocked-last"} {
		if code := check(t, addrs.base, checkKey, client).StatusCode; code != http.StatusTooManyRequests {
			t.Errorf("%s: %d, want 429 (blocked)", client, code)
		}
	}
	var codes []int
	for range 3 {
		codes = append(codes, check(t, addrs.base, checkKey, "free").StatusCode)
	}
	if want := []int{200, 200, 429}; !slices.Equal(codes, want) {
		t.Errorf("a client without an override: %v, want %v", codes, want)
	}
}

// The port every tenant's applications reach tells nothing of tenants:
// no /metrics, and a /readyz without the tenants' ids or versions. The
// admin listener, on loopback, has both.
func TestCheckPortTellsNothingOfTenants(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tn, version, checkKey, cpURL := acme(t, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 3, Window: time.Hour}})
	a, done := startDecider(t, ctx, []string{"-addr", "127.0.0.1:0", "-grpc-addr", "off", "-control-plane", cpURL,
		"-state-file", filepath.Join(t.TempDir(), "snapshot.pb")}, map[string]string{"SLUICE_DECIDER_KEY": "dk"})
	defer func() { cancel(); <-done }()
	if v := waitReady(t, a.admin); v[tn.ID] != version {
		t.Fatalf("admin /readyz: %v, want version %d of %s", v, version, tn.ID)
	}
	check(t, a.base, checkKey, "alice")
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(a.base + "/metrics"); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
		t.Errorf("the check port's /metrics: %d %.200s", code, body)
	}
	if code, body := get(a.base + "/readyz"); code != 200 || strings.Contains(body, tn.ID) || strings.Contains(body, "acme") || strings.TrimSpace(body) != `{"ready":true}` {
		t.Errorf("the check port's /readyz: %d %s, want {\"ready\":true} alone", code, body)
	}
	if code, body := get(a.admin + "/metrics"); code != 200 || !strings.Contains(body, `sluice_decisions_total{outcome="allowed",tenant="acme"} 1`) {
		t.Errorf("the admin listener's /metrics: %d, lacking the tenant's decisions", code)
	}
	if !strings.HasPrefix(a.admin, "http://127.0.0.1:") {
		t.Errorf("admin listener on %s, want loopback", a.admin)
	}
}

// Guessing check keys is slowed on every decider API: an address that
// sends more invalid keys than -auth-failures (5 here) is refused, 429 or
// resource_exhausted, its valid key too, over HTTP, Connect, gRPC and
// Envoy RLS alike; the invalid keys are counted and logged.
func TestInvalidCheckKeysAreThrottled(t *testing.T) {
	_, _, checkKey, cpURL := acme(t, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: 100, Window: time.Hour}})
	for _, api := range []string{"http", "connect", "grpc", "rls"} {
		t.Run(api, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			logs := &logtest.Buffer{}
			pr, pw := io.Pipe()
			errc := make(chan error, 1)
			args := []string{"-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0", "-control-plane", cpURL,
				"-state-file", filepath.Join(t.TempDir(), "snapshot.pb"), "-auth-failures", "5"}
			env := map[string]string{"SLUICE_DECIDER_KEY": "dk"}
			go func() { errc <- run(ctx, args, func(k string) string { return env[k] }, pw, logs); pw.Close() }()
			defer func() { cancel(); <-errc }()
			var a deciderAddrs
			lines := bufio.NewReader(pr)
			for a.base == "" || a.grpc == "" || a.admin == "" {
				line, err := lines.ReadString('\n')
				if err != nil {
					t.Fatalf("no banner: %v", err)
				}
				fields := strings.Fields(line)
				switch {
				case strings.HasPrefix(line, "decider listening"), strings.HasPrefix(line, "admin"):
					u := fields[len(fields)-1]
					if strings.HasPrefix(line, "admin") {
						a.admin = u
					} else {
						a.base = u
					}
				case strings.HasPrefix(line, "gRPC"):
					a.grpc = fields[len(fields)-1]
				}
			}
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			waitReady(t, a.base)
			conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// call checks with key over api and returns the answer's kind:
			// "ok", "unauthenticated" or "exhausted".
			call := func(key string) string {
				t.Helper()
				var code int
				switch api {
				case "http":
					code = check(t, a.base, key, "alice").StatusCode
				case "connect":
					req := connect.NewRequest(&sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "alice"}}})
					req.Header().Set("Authorization", "Bearer "+key)
					_, err := sluicev1connect.NewDecisionServiceClient(http.DefaultClient, a.base).Check(ctx, req)
					if err == nil {
						code = 200
					} else {
						code = map[connect.Code]int{connect.CodeUnauthenticated: 401, connect.CodeResourceExhausted: 429}[connect.CodeOf(err)]
					}
				case "grpc", "rls":
					gctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
					if api == "grpc" {
						_, err = sluicev1.NewDecisionServiceClient(conn).Check(gctx, &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "alice"}}})
					} else {
						_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(gctx, &rlsv3.RateLimitRequest{Domain: "acme",
							Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client_id", Value: "alice"}}}}})
					}
					code = map[codes.Code]int{codes.OK: 200, codes.Unauthenticated: 401, codes.ResourceExhausted: 429}[status.Code(err)]
				}
				return map[int]string{200: "ok", 401: "unauthenticated", 429: "exhausted"}[code]
			}
			if got := call(checkKey); got != "ok" {
				t.Fatalf("a valid key: %s", got)
			}
			for i := range 5 {
				if got := call(fmt.Sprintf("sk_check_guess%d", i)); got != "unauthenticated" {
					t.Fatalf("invalid key %d: %s", i, got)
				}
			}
			if got := call("sk_check_guess5"); got != "exhausted" {
				t.Fatalf("the 6th invalid key: %s, want refused", got)
			}
			if got := call(checkKey); got != "exhausted" {
				t.Fatalf("a valid key from the throttled address: %s, want refused", got)
			}
			m := metrics(t, a.admin)
			if sumOf(m, "sluice_check_key_failures_total") != 5 || sumOf(m, "sluice_check_key_throttled_total") != 2 {
				t.Errorf("metrics: %v invalid keys, %v refusals; want 5 and 2", sumOf(m, "sluice_check_key_failures_total"), sumOf(m, "sluice_check_key_throttled_total"))
			}
			if !strings.Contains(logs.String(), "invalid check key") {
				t.Errorf("nothing logged of the invalid keys:\n%s", logs)
			}
		})
	}
}
