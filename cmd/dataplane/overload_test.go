package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/controlplane"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// balancer forwards each TCP connection it accepts to the next of
// backends in turn, until the test ends, and returns its address: several
// deciders behind one address, as a layer 4 load balancer puts them.
func balancer(t *testing.T, backends []string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for i := 0; ; i++ {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", backends[i%len(backends)])
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in); out.Close() }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestMain lets the tests run the decider's main in a child process (the
// test binary re-executed) with its own GOMAXPROCS, and a process that only
// burns CPU beside it.
func TestMain(m *testing.M) {
	switch os.Getenv("SLUICE_DATAPLANE_CHILD") {
	case "decider":
		main()
		os.Exit(0)
	case "flood": // floods the decider at SLUICE_FLOOD_HTTP and _GRPC until killed
		flood(context.Background(), os.Getenv("SLUICE_FLOOD_HTTP"), os.Getenv("SLUICE_FLOOD_GRPC"), os.Getenv("SLUICE_FLOOD_KEY"))
		os.Exit(0)
	case "burn": // keeps every CPU busy until killed
		for range runtime.GOMAXPROCS(0) - 1 {
			go burn()
		}
		burn()
	}
	os.Exit(m.Run())
}

// floodProcess floods the deciders at a with checks of the tenant of key
// from a child process at the lowest CPU priority (nice 19), until the test
// ends.
func floodProcess(t *testing.T, a deciderAddrs, key string) {
	t.Helper()
	cmd := exec.Command("nice", "-n", "19", os.Args[0])
	cmd.Env = append(os.Environ(), "SLUICE_DATAPLANE_CHILD=flood", "SLUICE_FLOOD_HTTP="+a.base, "SLUICE_FLOOD_GRPC="+a.grpc, "SLUICE_FLOOD_KEY="+key)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// flood sends, until ctx ends, checks of new client ids of the tenant of
// key (slug flood) over HTTP to base, and CheckBatch calls of 100 and
// Envoy RLS requests of 10 descriptors to grpcAddr.
func flood(ctx context.Context, base, grpcAddr, key string) {
	var wg sync.WaitGroup
	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for g := range 32 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				_, _, _ = checkOnce(httpClient, base, key, fmt.Sprintf("h%d-%d", g, i))
			}
		})
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	gctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	decisions := sluicev1.NewDecisionServiceClient(conn)
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				batch := &sluicev1.CheckBatchRequest{}
				for k := range 100 {
					batch.Requests = append(batch.Requests, &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{
						{Key: "client_id", Value: fmt.Sprintf("b%d-%d-%d", g, i, k)}}})
				}
				_, _ = decisions.CheckBatch(gctx, batch)
			}
		})
	}
	rls := rlsv3.NewRateLimitServiceClient(conn)
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				req := &rlsv3.RateLimitRequest{Domain: "flood"}
				for k := range 10 {
					req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{
						{Key: "client_id", Value: fmt.Sprintf("r%d-%d-%d", g, i, k)}}})
				}
				_, _ = rls.ShouldRateLimit(gctx, req)
			}
		})
	}
	wg.Wait()
}

// burn spins forever, doing arithmetic nothing reads.
func burn() {
	x := uint64(1)
	for {
		x = x*6364136223846793005 + 1442695040888963407
		if x == 0 { // never: keeps the loop from being optimised away
			fmt.Println(x)
		}
	}
}

// deciderProcess runs a decider in a child process with args and env
// until the test ends, and returns its HTTP and gRPC addresses once it is
// ready.
func deciderProcess(t *testing.T, args []string, env ...string) deciderAddrs {
	t.Helper()
	return deciderProcessOf(t, os.Args[0], args, env...)
}

// deciderProcessOf is deciderProcess of the binary exe: the test binary,
// or a decider built as users build it (builtDecider).
func deciderProcessOf(t *testing.T, exe string, args []string, env ...string) deciderAddrs {
	t.Helper()
	cmd := exec.Command(exe, append([]string{"-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0",
		"-state-file", filepath.Join(t.TempDir(), "snapshot.pb"), "-events-spool", "off"}, args...)...)
	cmd.Env = append(os.Environ(), append(env, "SLUICE_DATAPLANE_CHILD=decider")...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	lines := bufio.NewReader(out)
	var a deciderAddrs
	proxying := slices.Contains(args, "-upstream")
	for a.base == "" || a.grpc == "" || a.admin == "" || proxying && a.proxy == "" {
		line, err := lines.ReadString('\n')
		if err != nil {
			_ = cmd.Process.Kill()
			close(done)
			t.Fatalf("the decider did not start: %v", err)
		}
		fields := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "decider listening"):
			a.base = strings.Fields(line[strings.Index(line, "http"):])[0]
		case strings.HasPrefix(line, "gRPC"):
			a.grpc = fields[len(fields)-1]
		case strings.HasPrefix(line, "admin"):
			a.admin = fields[len(fields)-1]
		case strings.HasPrefix(line, "proxying"):
			a.proxy = fields[1]
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out); _ = cmd.Wait(); close(done) }()
	waitReady(t, a.base)
	return a
}

// burnCPU runs a process that keeps every CPU busy until the test ends.
func burnCPU(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "SLUICE_DATAPLANE_CHILD=burn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// tenantOn creates a tenant of slug with rule in store and returns its
// check key.
func tenantOn(t *testing.T, store *pgstore.Store, slug string, rule policy.Rule) string {
	t.Helper()
	ctx := context.Background()
	tn, err := store.CreateTenant(ctx, "operator", policy.Tenant{Slug: slug, Name: slug})
	if err != nil {
		t.Fatal(err)
	}
	tiers, _ := store.ListTiers(ctx, tn.ID)
	if _, _, err := store.CreateRule(ctx, "operator", tn.ID, tiers[0].ID, rule); err != nil {
		t.Fatal(err)
	}
	key, _, err := store.CreateKey(ctx, "operator", tn.ID, policy.KeyCheck, "app")
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// controlPlane serves store's tenants to deciders until the test ends.
func controlPlane(t *testing.T, store *pgstore.Store) string {
	t.Helper()
	cp := httptest.NewServer(controlplane.NewHandler(controlplane.HandlerConfig{DeciderKey: "dk"}.OnPostgres(store, time.Minute)))
	t.Cleanup(func() { cp.CloseClientConnections(); cp.Close() })
	return cp.URL
}

// checkOnce posts one check of client with key and returns whether it was
// admitted and the Sluice-Degraded header ("" when Redis decided).
func checkOnce(client *http.Client, base, key, clientID string) (allowed bool, degraded string, err error) {
	req, _ := http.NewRequest("POST", base+"/v1/check", strings.NewReader(`{"descriptors":{"client_id":"`+clientID+`"}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return false, "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return false, "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return resp.StatusCode == http.StatusOK, resp.Header.Get("Sluice-Degraded"), nil
}

// metrics reads /metrics on a decider's admin listener.
func metrics(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// sumOf sums the series of metric name whose labels contain every one of
// labels (`tenant="flood"`).
func sumOf(body, name string, labels ...string) float64 {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if i := strings.LastIndexByte(line, ' '); ok && i > 0 {
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			sum += v
		}
	}
	return sum
}

// One tenant flooding the deciders, beyond what they and Redis serve on
// this machine, over HTTP, CheckBatch and Envoy RLS at once, lifts no
// other tenant's limit: tenant B, sending bursts of 20 against its rule of
// 5 a minute, a new client each burst, is admitted exactly 5 in every
// burst, every answer decided by Redis within B's budget. The flood is shed within its share, and no breaker opens.
// Every setting is the decider's default. It holds for one decider, and
// for three behind one address.
func TestNoisyNeighbour(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood of several seconds")
	}
	cputest.Alone(t)
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("deciders=%d", n), func(t *testing.T) { noisyNeighbour(t, n) })
	}
}

func noisyNeighbour(t *testing.T, deciders int) {
	store := pgstore.New(pgtest.Pool(t))
	floodKey := tenantOn(t, store, "flood", policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 1_000_000, Window: time.Second}})
	quietKey := tenantOn(t, store, "quiet", policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.TokenBucket, Limit: 5, Window: time.Minute}})
	_, prefix := redistest.Client(t)
	cp := controlPlane(t, store)
	var fleet []deciderAddrs
	var bases, grpcs []string
	for range deciders {
		d := deciderProcess(t, []string{"-control-plane", cp, "-redis-url", "redis://" + redistest.Addr(t), "-redis-prefix", prefix}, "SLUICE_DECIDER_KEY=dk")
		fleet = append(fleet, d)
		bases, grpcs = append(bases, strings.TrimPrefix(d.base, "http://")), append(grpcs, d.grpc)
	}
	a := deciderAddrs{base: "http://" + balancer(t, bases), grpc: balancer(t, grpcs)}

	// The flood comes from elsewhere, as it would: a process of its own
	// at the lowest CPU priority, so that on this machine it takes the
	// deciders' CPU no more than another machine's clients would.
	floodProcess(t, a, floodKey)

	// fleetMetrics reads every decider's metrics.
	fleetMetrics := func() string {
		var all strings.Builder
		for _, d := range fleet {
			all.WriteString(metrics(t, d.admin))
		}
		return all.String()
	}
	// Tenant B's bursts, once the flood is being shed.
	deadline := time.Now().Add(30 * time.Second)
	for sumOf(fleetMetrics(), "sluice_overload_decisions_total", `tenant="flood"`, `cause="shed"`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the flood never filled the decider")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var bursts []int64
	quietClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 20}}
	for burst := range 10 {
		var wg sync.WaitGroup
		var admitted atomic.Int64
		client := fmt.Sprintf("b-client-%d", burst) // a new client each burst, full at first
		for range 20 {
			wg.Go(func() {
				ok, degraded, err := checkOnce(quietClient, a.base, quietKey, client)
				switch {
				case err != nil:
					t.Errorf("tenant B's check: %v", err)
				case degraded != "":
					t.Errorf("tenant B's check decided without Redis (%s) during the flood", degraded)
				case ok:
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		bursts = append(bursts, admitted.Load())
		time.Sleep(100 * time.Millisecond)
	}
	m := fleetMetrics()

	// A token bucket of 5 a minute, full for each new client: 5 in every
	// burst of 20 sent at once.
	for i, got := range bursts {
		if got != 5 {
			t.Errorf("tenant B's burst %d admitted %d of 20, want 5 (bursts %v)", i, got, bursts)
		}
	}
	if v := sumOf(m, "sluice_breaker_state"); v != 0 {
		t.Errorf("breaker state %v after the flood, want 0 (closed)", v)
	}
	if v := sumOf(m, "sluice_engine_errors_total"); v != 0 {
		t.Errorf("%v engine errors with Redis healthy", v)
	}
	if v := sumOf(m, "sluice_overload_decisions_total", `tenant="quiet"`); v != 0 {
		t.Errorf("tenant B had %v decisions kept from Redis (shed %v, queued %v)", v,
			sumOf(m, "sluice_overload_decisions_total", `tenant="quiet"`, `cause="shed"`),
			sumOf(m, "sluice_overload_decisions_total", `tenant="quiet"`, `cause="queued"`))
	}
	t.Logf("flood: %v shed, %v queued past budget; B's bursts %v",
		sumOf(m, "sluice_overload_decisions_total", `tenant="flood"`, `cause="shed"`),
		sumOf(m, "sluice_overload_decisions_total", `tenant="flood"`, `cause="queued"`), bursts)
}

// A decider starved of CPU (GOMAXPROCS=1, a process burning every CPU
// beside it, load far beyond what it serves) with Redis healthy keeps
// limiting: every client is admitted at most its limit by Redis and at
// most its local share by the overload policy, no breaker opens, and the
// overload metrics count exactly the answers that said overload.
//
// The Redis timeout is 5s rather than 500ms: under the race detector a
// starved decider may read Redis's answer later than that, which would be
// a Redis failure by definition; the budget stays at its default.
func TestStarvedDeciderKeepsLimiting(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood of several seconds")
	}
	cputest.Alone(t)
	store := pgstore.New(pgtest.Pool(t))
	const limit = 50
	key := tenantOn(t, store, "starved", policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true,
		Params: policy.Params{Algorithm: policy.FixedWindow, Limit: limit, Window: time.Hour}})
	_, prefix := redistest.Client(t)
	a := deciderProcess(t, []string{"-control-plane", controlPlane(t, store), "-redis-url", "redis://" + redistest.Addr(t),
		"-redis-prefix", prefix, "-redis-timeout", "5s", "-max-in-flight", "8"}, "SLUICE_DECIDER_KEY=dk", "GOMAXPROCS=1")
	burnCPU(t)

	const clients = 20
	var byRedis, byOverload [clients]atomic.Int64
	var overloaded, answered atomic.Int64
	ctx, stop := context.WithTimeout(t.Context(), 4*time.Second)
	defer stop()
	var wg sync.WaitGroup
	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for g := range 64 {
		wg.Go(func() {
			for i := g; ctx.Err() == nil; i++ {
				c := i % clients
				ok, degraded, err := checkOnce(httpClient, a.base, key, "c"+strconv.Itoa(c))
				if err != nil {
					continue // the flood's end
				}
				answered.Add(1)
				switch {
				case degraded == "overload":
					overloaded.Add(1)
					if ok {
						byOverload[c].Add(1)
					}
				case degraded != "":
					t.Errorf("a decision degraded by %s with Redis healthy", degraded)
				case ok:
					byRedis[c].Add(1)
				}
			}
		})
	}
	wg.Wait()
	m := metrics(t, a.admin)
	for c := range clients {
		if n := byRedis[c].Load(); n > limit {
			t.Errorf("client %d: %d admitted by Redis, over its limit of %d", c, n, limit)
		}
		if n := byOverload[c].Load(); n > limit { // -local-share 1
			t.Errorf("client %d: %d admitted by the overload policy, over its local share of %d", c, n, limit)
		}
	}
	if v := sumOf(m, "sluice_breaker_state"); v != 0 {
		t.Errorf("breaker state %v, want 0 (closed)", v)
	}
	if v := sumOf(m, "sluice_engine_errors_total"); v != 0 {
		t.Errorf("%v engine errors with Redis healthy", v)
	}
	if overloaded.Load() == 0 {
		t.Error("no decision said overload: the load did not exceed the decider")
	}
	if v := sumOf(m, "sluice_overload_decisions_total", `tenant="starved"`); int64(v) != overloaded.Load() {
		t.Errorf("sluice_overload_decisions_total says %v, the answers %d", v, overloaded.Load())
	}
	t.Logf("%d answered, %d by the overload policy", answered.Load(), overloaded.Load())
}

// A setting that does not parse stops the decider process at start with
// an error naming the variable, its value and what it expects, rather than
// run on the default; booleans parse as strconv.ParseBool does.
func TestMalformedSettingsStopTheDecider(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"SLUICE_DECISION_BUDGET=50", `SLUICE_DECISION_BUDGET="50": want a duration with its unit`},
		{"SLUICE_REDIS_CLUSTER=yes", `SLUICE_REDIS_CLUSTER="yes": want true or false`},
		{"SLUICE_MAX_IN_FLIGHT=lots", `SLUICE_MAX_IN_FLIGHT="lots": want an integer`},
		{"SLUICE_LOCAL_SHARE=2", `-local-share (SLUICE_LOCAL_SHARE) 2: want 0 (1/live deciders) or more, at most 1`},
		{"SLUICE_OVERLOAD_POLICY=allow", `unknown overload policy "allow"`},
	} {
		cmd := exec.Command(os.Args[0], "-addr", "127.0.0.1:0", "-grpc-addr", "off", "-admin-addr", "off", "-state-file", filepath.Join(t.TempDir(), "s.pb"))
		cmd.Env = append(os.Environ(), tc.env, "SLUICE_DATAPLANE_CHILD=decider")
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
			t.Errorf("%s: exit %d (%v), want 1:\n%s", tc.env, code, err, out)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: the decider said %q, want %q", tc.env, out, tc.want)
		}
	}
	// 1 is true, as ParseBool reads it: with Sentinels and a Cluster both
	// named, the decider refuses to start.
	cmd := exec.Command(os.Args[0], "-addr", "127.0.0.1:0", "-grpc-addr", "off", "-admin-addr", "off", "-state-file", filepath.Join(t.TempDir(), "s.pb"))
	cmd.Env = append(os.Environ(), "SLUICE_REDIS_CLUSTER=1", "SLUICE_REDIS_SENTINEL=1", "REDIS_URL=redis://127.0.0.1:1", "SLUICE_DATAPLANE_CHILD=decider")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "REDIS_URL") {
		t.Errorf("SLUICE_REDIS_CLUSTER=1 and SLUICE_REDIS_SENTINEL=1: %v\n%s", err, out)
	}
}
