package dataplane

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// BenchmarkEnvoyRLSH2load loads Envoy's ShouldRateLimit with h2load
// (nghttp2's HTTP/2 load generator in C, Debian's nghttp2-client), so the
// figure is the decider's, as BenchmarkDecisionsWrk's is for HTTP: 50
// streams on 2 connections, the benchmark decider on the local Redis.
// h2load sends one body, so every request checks the same client id; with
// a limit of 1,000,000/s it is never rejected, and a counter costs Redis
// the same whatever its key. b.N is ignored: h2load runs for
// SLUICE_WRK_DURATION (default 10s). Skipped where h2load is not installed.
//
// The same command measures any RLS server, envoyproxy/ratelimit included
// (docs/benchmarks.md).
func BenchmarkEnvoyRLSH2load(b *testing.B) {
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "client-1")}}
	h2loadGRPC(b, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, req, 1)
}

// BenchmarkCheckBatchH2load is BenchmarkEnvoyRLSH2load for
// DecisionService.CheckBatch calls of 25 checks, each of another client,
// two calls in flight, as the Go SDK's Coalesce sends the checks of 50
// concurrent callers: decisions/s counts checks, the latencies are of
// calls.
func BenchmarkCheckBatchH2load(b *testing.B) {
	const n = benchClients / 2
	req := &sluicev1.CheckBatchRequest{}
	for i := range n {
		req.Requests = append(req.Requests, &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "client-" + strconv.Itoa(i)}}})
	}
	h2loadGRPC(b, sluicev1.DecisionService_CheckBatch_FullMethodName, req, n)
}

// h2loadGRPC loads the benchmark decider's grpc-go server with calls of
// method carrying req, each of decisions decisions, and reports what they
// cost.
func h2loadGRPC(b *testing.B, method string, req proto.Message, decisions int) {
	h2load, err := exec.LookPath("h2load")
	if err != nil {
		b.Skip("h2load is not installed (apt-get install nghttp2-client)")
	}
	cfg, key := benchConfig(b, 1_000_000, nil)
	addr := listenGRPC(b, cfg)
	dir := b.TempDir()
	body, logFile := filepath.Join(dir, "request.bin"), filepath.Join(dir, "requests.log")
	if err := os.WriteFile(body, grpcFrame(b, req), 0o600); err != nil {
		b.Fatal(err)
	}
	d := os.Getenv("SLUICE_WRK_DURATION")
	if d == "" {
		d = "10s"
	}
	secs := wrkSeconds(b, d)
	rc := redis.NewClient(&redis.Options{Addr: redistest.Addr(b)})
	defer rc.Close()
	r0, g0 := serverCPU(b, rc), cputest.ProcessCPU()
	pipes0, calls0 := benchEngine.Pipelines()
	b.ResetTimer()
	// benchClients decisions in flight, on two connections.
	out, err := exec.Command(h2load, "-t2", "-c2", fmt.Sprintf("-m%d", max(1, benchClients/decisions/2)), "-D", strconv.Itoa(int(secs)),
		"--log-file="+logFile, "-d", body, "-H", "content-type: application/grpc", "-H", "te: trailers",
		"-H", "authorization: Bearer "+key, "http://"+addr+method).CombinedOutput()
	b.StopTimer()
	if err != nil {
		b.Fatalf("h2load: %v\n%s", err, out)
	}
	r1, g1 := serverCPU(b, rc), cputest.ProcessCPU()
	lats := h2loadLatencies(b, logFile)
	// gRPC answers every call with HTTP 200, its error in the trailers: a
	// refused call has no message, so the data received must be a message
	// per request.
	if data := h2loadData(b, out); data < int64(len(lats))*20 {
		b.Fatalf("%d bytes of messages for %d requests: calls failed\n%s", data, len(lats), out)
	}
	n := float64(len(lats) * decisions)
	b.ReportMetric(float64(g1-g0)/float64(time.Microsecond)/n, "decider-cpu-µs/op")
	b.ReportMetric(float64(r1-r0)/float64(time.Microsecond)/n, "redis-cpu-µs/op")
	reportBatch(b, pipes0, calls0)
	b.ReportMetric(n/secs, "decisions/s")
	b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds())/1000, "p99-ms")
}

// grpcFrame is m as the body of a gRPC call: uncompressed, length-prefixed.
func grpcFrame(b *testing.B, m proto.Message) []byte {
	msg, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	return append(frame, msg...)
}

var h2loadTraffic = regexp.MustCompile(`\(([0-9]+)\) data`)

// h2loadData is the bytes of DATA frames h2load received.
func h2loadData(b *testing.B, out []byte) int64 {
	m := h2loadTraffic.FindSubmatch(out)
	if m == nil {
		b.Fatalf("no traffic line in h2load's output:\n%s", out)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// h2loadLatencies reads the sorted request latencies of h2load's
// --log-file (start µs, status, duration µs per line), failing on a status
// other than 200.
func h2loadLatencies(b *testing.B, path string) []time.Duration {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var lats []time.Duration
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) != 3 || string(fields[1]) != "200" {
			b.Fatalf("h2load: request %q", sc.Text())
		}
		us, _ := strconv.ParseInt(string(fields[2]), 10, 64)
		lats = append(lats, time.Duration(us)*time.Microsecond)
	}
	if len(lats) == 0 {
		b.Fatal("h2load made no requests")
	}
	slices.Sort(lats)
	return lats
}
