package dataplane

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// The decider's gRPC port answers the standard health service: not
// serving until its first configuration, serving after, and not serving
// once it begins to stop; the same for each of its services, and NotFound
// for a service it does not have.
func TestGRPCHealth(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewGRPCServer(HTTPConfig{})
	ready := make(chan struct{})
	stop := ServeHealth(srv, ready)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
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
