package grpcload

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// server is grpc-go's health service, counting the calls that carried
// the expected authorization metadata.
func server(t *testing.T, authorized *atomic.Int64, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(append(opts, grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) != 1 || v[0] != "Bearer k" {
			return nil, status.Error(codes.Unauthenticated, "no key")
		}
		authorized.Add(1)
		return h(ctx, req)
	}))...)
	hs := health.NewServer()
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func message(t *testing.T, service string) []byte {
	t.Helper()
	b, err := proto.Marshal(&healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func serving(msg []byte) bool {
	var res healthpb.HealthCheckResponse
	return proto.Unmarshal(msg, &res) == nil && res.Status == healthpb.HealthCheckResponse_SERVING
}

// TestCountsEveryCall makes a fixed number of calls over several
// connections, half of them answered with an error, and checks every
// call is counted once, as what it was.
func TestCountsEveryCall(t *testing.T) {
	var authorized atomic.Int64
	addr := server(t, &authorized)
	res, err := Run(t.Context(), Config{
		Addr: addr, Method: healthpb.Health_Check_FullMethodName,
		Messages: [][]byte{message(t, "up"), message(t, "unknown")},
		Metadata: []string{"authorization", "Bearer k"},
		Conns:    3, Streams: 7, Calls: 1001, Classify: serving,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 1001 || int64(len(res.Latencies)) != res.Calls || authorized.Load() != 1001 {
		t.Fatalf("%d calls, %d latencies, %d reached the service; want 1001 each", res.Calls, len(res.Latencies), authorized.Load())
	}
	// Messages alternate on each connection, which starts at its own
	// offset: the split is within one call per connection of half.
	if res.Matched+res.Failed != res.Calls || res.Matched < 497 || res.Matched > 504 {
		t.Fatalf("%d serving, %d failed of %d calls", res.Matched, res.Failed, res.Calls)
	}
	if !strings.Contains(res.FirstErr, "grpc-status 5") {
		t.Fatalf("first error %q, want NotFound's grpc-status 5", res.FirstErr)
	}
	if res.Percentile(0.5) <= 0 || res.Percentile(0.99) < res.Percentile(0.5) || res.Percentile(1) != res.Latencies[len(res.Latencies)-1] {
		t.Fatalf("percentiles p50 %v, p99 %v", res.Percentile(0.5), res.Percentile(0.99))
	}
}

// TestFailedCallsAreReported checks that a server refusing every call is
// measured as failures, not as successes.
func TestFailedCallsAreReported(t *testing.T) {
	var authorized atomic.Int64
	addr := server(t, &authorized)
	res, err := Run(t.Context(), Config{Addr: addr, Method: healthpb.Health_Check_FullMethodName, Messages: [][]byte{message(t, "up")}, Calls: 50})
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 50 || res.Failed != 50 || !strings.Contains(res.FirstErr, "grpc-status 16") || authorized.Load() != 0 {
		t.Fatalf("%+v", res)
	}
}

// TestRunsForADuration stops starting calls once Duration has passed and
// waits for those in flight. The window's worth of messages (2 × 25
// streams of 16 KiB, more than the server's first 64 KiB connection
// window) also exercises the send window.
func TestRunsForADuration(t *testing.T) {
	var authorized atomic.Int64
	addr := server(t, &authorized)
	big := message(t, strings.Repeat("x", maxMessage-10))
	if len(big) > maxMessage {
		t.Fatalf("message of %d bytes", len(big))
	}
	start := time.Now()
	res, err := Run(t.Context(), Config{Addr: addr, Method: healthpb.Health_Check_FullMethodName, Messages: [][]byte{big}, Metadata: []string{"authorization", "Bearer k"}, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls < 50 || res.Calls != authorized.Load() || res.Failed != res.Calls {
		t.Fatalf("%d calls, %d reached the service, %d failed (NotFound): want every call to arrive", res.Calls, authorized.Load(), res.Failed)
	}
	if took := time.Since(start); took < 200*time.Millisecond || res.Elapsed < 200*time.Millisecond {
		t.Fatalf("stopped after %v", took)
	}
}

// TestRefusesBadConfigs names what is wrong instead of loading.
func TestRefusesBadConfigs(t *testing.T) {
	for _, cfg := range []Config{
		{Addr: "127.0.0.1:1", Method: "/a/b"},
		{Addr: "127.0.0.1:1", Messages: [][]byte{{}}},
		{Addr: "127.0.0.1:1", Method: "/a/b", Messages: [][]byte{{}}, Metadata: []string{"odd"}},
		{Addr: "127.0.0.1:1", Method: "/a/b", Messages: [][]byte{make([]byte, maxMessage+1)}},
	} {
		if _, err := Run(t.Context(), cfg); err == nil || !strings.HasPrefix(err.Error(), "grpcload: ") {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	// Nothing listening: the dial's error.
	if _, err := Run(t.Context(), Config{Addr: "127.0.0.1:1", Method: "/a/b", Messages: [][]byte{{}}, Calls: 1}); err == nil {
		t.Error("no server: no error")
	}
}

// TestHonoursTheServersStreamLimit: a server allowing 3 concurrent
// streams per connection gets at most 3, however many Streams asks for,
// and every call succeeds (a stream over its limit would be refused).
func TestHonoursTheServersStreamLimit(t *testing.T) {
	var authorized, inFlight, most atomic.Int64
	addr := server(t, &authorized, grpc.MaxConcurrentStreams(3), grpc.ChainUnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			return h(ctx, req)
		}))
	res, err := Run(t.Context(), Config{Addr: addr, Method: healthpb.Health_Check_FullMethodName, Messages: [][]byte{message(t, "up")},
		Metadata: []string{"authorization", "Bearer k"}, Conns: 1, Streams: 20, Calls: 300, Classify: serving})
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 300 || res.Failed != 0 || res.Matched != 300 {
		t.Fatalf("%d calls, %d failed (%s), %d serving", res.Calls, res.Failed, res.FirstErr, res.Matched)
	}
	if most.Load() > 3 {
		t.Fatalf("%d calls in flight at once on a server allowing 3", most.Load())
	}
}
