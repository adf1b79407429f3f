// Package grpcserve is the decider's grpc-go server, which every gRPC
// protocol (sluice.v1.DecisionService, Envoy's rate limit service,
// gubernator's V1) registers its service on: its limits, keepalive
// policy, codec, panic recovery, health service and graceful stop.
package grpcserve

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // calls a client compresses (grpc-go's UseCompressor, Java's withCompression) are understood, and answered in kind; not left to a dependency's import
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/tap"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// streamWorkers is the gRPC server's pool of kept call goroutines; idle
// ones cost only their stacks. A call waits for Redis most of its time, so
// the pool is sized for the calls in flight, not for the cores: grpc-go
// starts a fresh goroutine for a call that finds every worker busy, and
// growing a fresh goroutine's stack to a decision's depth cost 7% of the
// decider's CPU with one worker per core.
const streamWorkers = 256

// MaxStreams bounds the calls in flight on one connection (grpc-go's
// default is unbounded: one connection could hold any number of
// goroutines). A client with more to send, Envoy's connection pool for
// one, opens another connection.
const MaxStreams = 1000

// NewServer returns the decider's grpc-go server, with server reflection
// and no other service: each protocol registers its own on it. A panic in
// a call is answered Internal, recorded by svc; a request that is not its
// call's message is answered InvalidArgument. grpc-go's own server, not
// net/http's HTTP/2: on these unary hot paths it does about twice the
// calls per CPU second (docs/benchmarks.md).
func NewServer(svc decision.Service, opts ...grpc.ServerOption) *grpc.Server {
	return newServer(svc, keepalivePolicy, opts...)
}

// Stop stops s gracefully, letting calls in flight finish, but for at
// most grace: a long-lived stream (a health Watch, which clients hold open
// for as long as they like) would otherwise keep the decider from ever
// stopping. What is still open then is cut.
func Stop(s *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.Stop()
		<-done
	}
}

// keepalivePolicy lets a client keep its connections alive with HTTP/2
// PINGs as often as every 10 s, calls in flight or not: Envoy's
// connection_keepalive on its rate limit cluster, say. grpc-go's default
// (one PING per 5 minutes while calls are in flight, none in 2 hours
// without) answers such a client's third PING on an idle connection with
// GOAWAY too_many_pings, and its next check waits for a new connection.
var keepalivePolicy = keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}

func newServer(cfg decision.Service, kep keepalive.EnforcementPolicy, opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append([]grpc.ServerOption{grpc.NumStreamWorkers(streamWorkers), grpc.MaxRecvMsgSize(1 << 20),
		grpc.MaxConcurrentStreams(MaxStreams), grpc.KeepaliveEnforcementPolicy(kep),
		grpc.ForceServerCodecV2(grpcCodec), grpc.InTapHandle(door(&cfg)),
		grpc.ChainUnaryInterceptor(recoverUnary(&cfg), refuseMalformedUnary), grpc.ChainStreamInterceptor(recoverStream(&cfg), refuseMalformedStream)}, opts...)...)
	reflection.Register(s) // grpcurl and similar tools need no .proto files
	return s
}

// doorMethods are the calls door may refuse: sluice.v1.DecisionService's
// checks, whose callers read RESOURCE_EXHAUSTED as a rejection. Envoy's
// rate limit service is not among them: Envoy answers an error by its
// failure_mode_deny, which admits by default; its calls are shed after
// decoding instead, and answered by the overload policy.
var doorMethods = map[string]bool{"/sluice.v1.DecisionService/Check": true, "/sluice.v1.DecisionService/CheckBatch": true}

// door refuses, before its message is read, a check of a tenant that
// crowds a full decider (decision.Service.Door), from the key in its
// metadata. A call it cannot place (no key, an invalid one) goes on, for
// its handler to answer.
func door(svc *decision.Service) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		// The handler authenticates the key anyway: hash it here only
		// when the decider is full and a tenant may be crowding it.
		if !doorMethods[info.FullMethodName] || !svc.Full() {
			return ctx, nil
		}
		auth := info.Header.Get("authorization")
		if len(auth) == 0 || svc.Authenticate == nil {
			return ctx, nil
		}
		c, err := svc.Authenticate(auth[0])
		if err != nil {
			return ctx, nil
		}
		if err := svc.Door(c); err != nil {
			return ctx, protoconv.GRPCError(decision.ErrCrowded.Code, decision.ErrCrowded.Message)
		}
		return ctx, nil
	}
}

// ServeHealth registers the standard grpc.health.v1.Health service on s,
// for Envoy's and Kubernetes' gRPC health checks: NOT_SERVING until ready
// is closed (the decider's first configuration), SERVING after, and
// NOT_SERVING again once stop is called, at shutdown, so that balancers
// drain the decider before it stops answering. It answers for the server
// as a whole ("") and for each of the services named.
func ServeHealth(s *grpc.Server, ready <-chan struct{}, services ...string) (stop func()) {
	hs := health.NewServer()
	names := append([]string{""}, services...)
	for _, n := range names {
		hs.SetServingStatus(n, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthpb.RegisterHealthServer(s, hs)
	done := make(chan struct{})
	go func() {
		select {
		case <-ready:
			for _, n := range names {
				hs.SetServingStatus(n, healthpb.HealthCheckResponse_SERVING)
			}
		case <-done:
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			hs.Shutdown() // every service NOT_SERVING, for good
		})
	}
}
