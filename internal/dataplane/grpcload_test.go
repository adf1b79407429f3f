package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/grpcload"
	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// grpcloadEnv, set in a test binary's environment, makes the binary a
// grpcload generator instead (TestMain), reading its grpcload.Config as
// JSON from stdin: the benchmarks below re-execute themselves so that the
// generator's CPU is not counted as the decider's.
const grpcloadEnv = "SLUICE_GRPCLOAD"

func TestMain(m *testing.M) {
	if os.Getenv(grpcloadEnv) != "" {
		os.Exit(grpcloadChild())
	}
	os.Exit(m.Run())
}

// leanResult is what the generator process reports.
type leanResult struct {
	Calls, Failed int64
	FirstErr      string
	P50, P99      time.Duration
	Elapsed       time.Duration
}

func grpcloadChild() int {
	var cfg grpcload.Config
	if err := json.NewDecoder(os.Stdin).Decode(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	res, err := grpcload.Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = json.NewEncoder(os.Stdout).Encode(leanResult{Calls: res.Calls, Failed: res.Failed, FirstErr: res.FirstErr,
		P50: res.Percentile(0.5), P99: res.Percentile(0.99), Elapsed: res.Elapsed})
	return 0
}

// BenchmarkEnvoyRLSLean loads Envoy's ShouldRateLimit from grpcload in
// another process: 50 streams on 2 connections (SLUICE_BENCH_CALLERS), each request one
// descriptor of one of benchKeys client ids, the benchmark decider on the
// local Redis. It is BenchmarkEnvoyRLSH2load over many keys (h2load sends
// one body) and BenchmarkDecisionsEnvoyRLS without grpc-go's client in the
// decider's process. b.N is ignored: the load runs for
// SLUICE_WRK_DURATION (default 10s).
func BenchmarkEnvoyRLSLean(b *testing.B) {
	msgs := make([]proto.Message, benchKeys)
	for i := range msgs {
		msgs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("client_id", "client-"+strconv.Itoa(i))}}
	}
	leanGRPC(b, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, msgs)
}

// BenchmarkDecisionsGRPCLean is BenchmarkEnvoyRLSLean for
// DecisionService.Check on the decider's grpc-go server.
func BenchmarkDecisionsGRPCLean(b *testing.B) {
	msgs := make([]proto.Message, benchKeys)
	for i := range msgs {
		msgs[i] = &sluicev1.CheckRequest{Descriptors: []*sluicev1.Descriptor{{Key: "client_id", Value: "client-" + strconv.Itoa(i)}}}
	}
	leanGRPC(b, sluicev1.DecisionService_Check_FullMethodName, msgs)
}

// leanGRPC loads method of the benchmark decider's grpc-go server with
// msgs in turn, from grpcload in a child process, and reports what the
// calls cost.
func leanGRPC(b *testing.B, method string, msgs []proto.Message) {
	cfg, key := benchConfig(b, 1_000_000, nil)
	addr := listenGRPC(b, cfg)
	d := os.Getenv("SLUICE_WRK_DURATION")
	if d == "" {
		d = "10s"
	}
	callers := benchClients
	if v := os.Getenv("SLUICE_BENCH_CALLERS"); v != "" { // calls in flight, over two connections
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SLUICE_BENCH_CALLERS=%q: a number of calls, at least 1", v)
		}
		callers = n
	}
	load := grpcload.Config{Addr: addr, Method: method, Metadata: []string{"authorization", "Bearer " + key},
		Conns: min(2, callers), Streams: max(1, callers/2), Duration: time.Duration(wrkSeconds(b, d) * float64(time.Second))}
	for _, m := range msgs {
		bs, err := proto.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		load.Messages = append(load.Messages, bs)
	}
	spec, err := json.Marshal(load)
	if err != nil {
		b.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: redistest.Addr(b)})
	defer rc.Close()
	r0, g0, a0 := serverCPU(b, rc), cputest.ProcessCPU(), heapAllocs()
	pipes0, calls0 := benchEngine.Pipelines()
	b.ResetTimer()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), grpcloadEnv+"=1")
	if v := os.Getenv("SLUICE_LOADGEN_PROCS"); v != "" { // the generator's GOMAXPROCS, apart from the decider's
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+v)
	}
	cmd.Stdin, cmd.Stderr = bytes.NewReader(spec), os.Stderr
	out, err := cmd.Output()
	b.StopTimer()
	if err != nil {
		b.Fatalf("grpcload: %v\n%s", err, out)
	}
	r1, g1, a1 := serverCPU(b, rc), cputest.ProcessCPU(), heapAllocs()
	var res leanResult
	if err := json.Unmarshal(out, &res); err != nil {
		b.Fatalf("grpcload's answer %q: %v", out, err)
	}
	if res.Failed > 0 || res.Calls == 0 {
		b.Fatalf("%d of %d calls failed, the first: %s", res.Failed, res.Calls, res.FirstErr)
	}
	n := float64(res.Calls)
	b.ReportMetric(float64(g1-g0)/float64(time.Microsecond)/n, "decider-cpu-µs/op")
	b.ReportMetric(float64(r1-r0)/float64(time.Microsecond)/n, "redis-cpu-µs/op")
	b.ReportMetric(float64(a1-a0)/n, "allocs/decision")
	b.ReportMetric(float64(cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())/float64(time.Microsecond)/n, "loadgen-cpu-µs/op")
	reportBatch(b, pipes0, calls0)
	b.ReportMetric(n/res.Elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(res.P50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(res.P99.Microseconds())/1000, "p99-ms")
}
