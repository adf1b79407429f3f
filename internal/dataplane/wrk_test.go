package dataplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/metrics"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// BenchmarkDecisionsWrk loads POST /v1/check with wrk, a load generator in
// C that costs a fraction of a Go client's CPU, so the figure is the
// decider's rather than the client's: 50 connections, 1 thread
// (SLUICE_WRK_THREADS), client
// ids over benchKeys, the benchmark decider on the local Redis. b.N is
// ignored: wrk runs for SLUICE_WRK_DURATION (default 10s). Skipped where
// wrk is not installed (apt-get install wrk).
func BenchmarkDecisionsWrk(b *testing.B) {
	wrk := wrkPath(b)
	base, key := benchDecider(b)
	pipes0, calls0 := benchEngine.Pipelines()
	runWrk(b, wrk, wrkScript(key), base+"/v1/check", "decider-cpu-µs/op")
	reportBatch(b, pipes0, calls0)
}

// BenchmarkProxyWrk is the reverse proxy under wrk's load: GET requests
// of 10,000 client ids (X-Client-Id) through the proxy, decided on the
// local Redis (SLUICE_BENCH_SYNC as for the decision benchmarks), to an
// upstream in this process that answers "ok". SLUICE_BENCH_PROXY_TRANSPORT=default
// forwards with net/http's default transport instead of the proxy's own.
func BenchmarkProxyWrk(b *testing.B) {
	wrk := wrkPath(b)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	b.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	cfg, key := benchConfig(b, 1_000_000, nil)
	pc := proxy.Config{API: cfg, Upstream: u, IdentityHeader: "X-Client-Id",
		Tenant: func() (*decide.Compiled, error) { return cfg.Authenticate("Bearer " + key) }}
	if os.Getenv("SLUICE_BENCH_PROXY_TRANSPORT") == "default" {
		pc.Transport = http.DefaultTransport
	}
	px := httptest.NewServer(proxy.New(pc))
	b.Cleanup(px.Close)
	script := wrkCycle(`wrk.format("GET", nil, {["X-Client-Id"] = "client-" .. i})`)
	runWrk(b, wrk, script, px.URL+"/", "proxy-and-upstream-cpu-µs/op")
}

// wrkPath is wrk's path; the benchmark is skipped without it.
func wrkPath(b *testing.B) string {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		b.Skip("wrk is not installed")
	}
	return wrk
}

// runWrk runs wrk (-t2, benchClients connections, for SLUICE_WRK_DURATION,
// default 10s) with script against target, fails on any answer but 2xx
// and on any connection's error or timeout, and reports requests/s, p50
// and p99, and what one request cost this process (as cpuMetric), Redis
// and wrk in CPU.
func runWrk(b *testing.B, wrk, script, target, cpuMetric string) {
	path := filepath.Join(b.TempDir(), "load.lua")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		b.Fatal(err)
	}
	d := os.Getenv("SLUICE_WRK_DURATION")
	if d == "" {
		d = "10s"
	}
	rc := redis.NewClient(&redis.Options{Addr: redistest.Addr(b)})
	defer rc.Close()
	r0, g0, w0, a0 := serverCPU(b, rc), cputest.ProcessCPU(), childrenCPU(), heapAllocs()
	b.ResetTimer()
	// One wrk thread drives 50 connections at 10 µs of CPU a request, far
	// from its ceiling here; a second only adds a runnable thread on the
	// two cores the decider and Redis share (p99 +1–1.5 ms).
	threads := os.Getenv("SLUICE_WRK_THREADS")
	if threads == "" {
		threads = "1"
	}
	out, err := exec.Command(wrk, "-t"+threads, fmt.Sprintf("-c%d", benchClients), "-d"+d, "--latency", "-s", path, target).CombinedOutput()
	b.StopTimer()
	if err != nil {
		b.Fatalf("wrk: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("Non-2xx")) || bytes.Contains(out, []byte("Socket errors")) {
		b.Fatalf("wrk saw refused or failed requests:\n%s", out)
	}
	r1, g1, w1, a1 := serverCPU(b, rc), cputest.ProcessCPU(), childrenCPU(), heapAllocs()
	rate, p50, p99 := parseWrk(b, out)
	n := rate * wrkSeconds(b, d)
	b.ReportMetric(float64(g1-g0)/float64(time.Microsecond)/n, cpuMetric)
	b.ReportMetric(float64(a1-a0)/n, "allocs/decision")
	b.ReportMetric(float64(r1-r0)/float64(time.Microsecond)/n, "redis-cpu-µs/op")
	b.ReportMetric(float64(w1-w0)/float64(time.Microsecond)/n, "wrk-cpu-µs/op")
	b.ReportMetric(rate, "decisions/s")
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
}

// heapAllocs is how many heap objects this process has allocated: over
// a load from another process, it is what the server allocates, from the
// socket to the answer.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// childrenCPU is the CPU time this process's waited-for children (wrk)
// have used, user and system.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time the Redis server has used (INFO cpu).
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	ms := redisCPULine.FindAllStringSubmatch(info, -1)
	if len(ms) != 2 {
		b.Fatalf("no used_cpu_sys and used_cpu_user in INFO cpu:\n%s", info)
	}
	for _, m := range ms {
		v, _ := strconv.ParseFloat(m[1], 64)
		total += v
	}
	return time.Duration(total * float64(time.Second))
}

// wrkSeconds is wrk's -d duration in seconds.
func wrkSeconds(b *testing.B, d string) float64 {
	dur, err := time.ParseDuration(d)
	if err != nil {
		b.Fatalf("SLUICE_WRK_DURATION: %v", err)
	}
	return dur.Seconds()
}

// wrkScript makes each request a check of the next client id.
func wrkScript(key string) string {
	// The requests are built once per thread, in init, and request() only
	// picks the next: building each with wrk.format, as wrk's own docs
	// warn, costs the generator more CPU than the server it measures.
	return wrkCycle(fmt.Sprintf(`wrk.format("POST", nil, {["Authorization"] = "Bearer %s", ["Content-Type"] = "application/json"},
      '{"descriptors":{"client_id":"client-' .. i .. '"}}')`, key))
}

// wrkCycle is a wrk script whose requests cycle through benchKeys client
// ids, request i (a Lua expression of i) built once per thread in init.
func wrkCycle(request string) string {
	return fmt.Sprintf(`local requests = {}
local n = 0
local keys = %d
init = function(args)
  for i = 0, keys - 1 do
    requests[i] = %s
  end
end
request = function()
  n = (n + 1) %% keys
  return requests[n]
end
`, benchKeys, request)
}

var (
	redisCPULine = regexp.MustCompile(`(?m)^used_cpu_(?:sys|user):([0-9.]+)`)
	wrkRate      = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkLatency   = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
)

// parseWrk reads requests/s and the p50 and p99 latencies (ms) from wrk's
// --latency report.
func parseWrk(b *testing.B, out []byte) (rate, p50, p99 float64) {
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		b.Fatalf("no rate in wrk's output:\n%s", out)
	}
	rate, _ = strconv.ParseFloat(string(m[1]), 64)
	for _, l := range wrkLatency.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(l[2]), 64)
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[string(l[3])]
		ms := v * float64(unit) / float64(time.Millisecond)
		if string(l[1]) == "50" {
			p50 = ms
		} else {
			p99 = ms
		}
	}
	return rate, p50, p99
}
