package dataplane

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/decision/decisiontest"
	"github.com/sluicehq/sluice/internal/grpcserve"
)

// The decider's gRPC port answers the standard health service: not
// serving until its first configuration, serving after, and not serving
// once it begins to stop; the same for each of its services, and NotFound
// for a service it does not have.
func TestGRPCHealth(t *testing.T) {
	ready := make(chan struct{})
	conn, stop, _ := serveWithHealth(t, ready)
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()

	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		res, err := watch.Recv()
		if err != nil || res.Status != want {
			t.Fatalf("watched status %v (%v), want %v", res.GetStatus(), err, want)
		}
	}
	check := func(service string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil || res.Status != want {
			t.Fatalf("Check(%q) = %v (%v), want %v", service, res.GetStatus(), err, want)
		}
	}
	next(healthpb.HealthCheckResponse_NOT_SERVING)
	check("envoy.service.ratelimit.v3.RateLimitService", healthpb.HealthCheckResponse_NOT_SERVING)
	close(ready)
	next(healthpb.HealthCheckResponse_SERVING)
	for _, s := range []string{"", "envoy.service.ratelimit.v3.RateLimitService", "sluice.v1.DecisionService"} {
		check(s, healthpb.HealthCheckResponse_SERVING)
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check of an unknown service: %v, want NotFound", err)
	}
	stop()
	next(healthpb.HealthCheckResponse_NOT_SERVING)
	check("sluice.v1.DecisionService", healthpb.HealthCheckResponse_NOT_SERVING)
	stop() // twice is harmless
}

// The port describes itself (server reflection): grpcurl lists and calls
// its services without .proto files.
func TestGRPCReflection(t *testing.T) {
	conn, stop, _ := serveWithHealth(t, nil)
	defer stop()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range res.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"envoy.service.ratelimit.v3.RateLimitService", "sluice.v1.DecisionService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, without %s", names, want)
		}
	}
	// And describes a service's file, so a tool can build its requests.
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: "sluice.v1.DecisionService"}}); err != nil {
		t.Fatal(err)
	}
	if res, err := stream.Recv(); err != nil || len(res.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("no file describes sluice.v1.DecisionService: %v %v", res, err)
	}
}

// serveWithHealth serves the decider's gRPC server (no tenants) with its
// health service on a loopback port until the test ends, and returns a
// client connection to it, the health service's stop and the server.
func serveWithHealth(t *testing.T, ready <-chan struct{}) (*grpc.ClientConn, func(), *grpcserve.Server) {
	srv := grpcserve.NewServer(decision.Service{})
	RegisterGRPC(srv, decision.Service{}) // as Serve does
	stop := grpcserve.ServeHealth(srv, ready, GRPCServices...)
	return decisiontest.ServeGRPC(t, srv), stop, srv
}

// grpcserve.Stop lets a call in flight finish but does not wait on a stream
// that never ends (a health Watch): past its grace it cuts it.
func TestStopGRPCBoundsTheWait(t *testing.T) {
	conn, stop, srv := serveWithHealth(t, nil)
	watch, err := healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil { // the stream is open on the server
		t.Fatal(err)
	}
	stop()
	stopped := make(chan struct{})
	go func() { grpcserve.Stop(srv, 100*time.Millisecond); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("grpcserve.Stop waited on an open Watch past its grace")
	}
	// The watcher saw NOT_SERVING, then its stream end.
	for {
		res, err := watch.Recv()
		if err != nil {
			break
		}
		if res.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("after stop: %v", res.Status)
		}
	}
}
