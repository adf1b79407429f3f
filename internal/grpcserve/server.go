// Package grpcserve is the decider's gRPC server, which every gRPC
// protocol (sluice.v1.DecisionService, Envoy's rate limit service,
// gubernator's V1) registers its service on: HTTP/2 and gRPC's framing
// written for unary checks, with its limits, keepalive policy, panic
// recovery, health service and graceful stop.
//
// It serves the services grpc-go's generated code describes
// (grpc.ServiceDesc), unary and streaming, so that grpc-go's health and
// reflection services run on it unchanged. It is not grpc-go's server:
// that one spent about 50 allocations and a third of the decider's CPU
// on each unary call (docs/benchmarks.md). Here a call's state is pooled,
// its headers are decoded against the connection's HPACK table without
// copies, its answer is encoded into a pooled buffer, and one goroutine
// per connection writes every call's frames, a batch per system call.
//
// What it leaves out: server push, priorities, and HPACK's dynamic table
// on what it sends. Compression is gzip alone. A unary handler cannot set
// headers or trailers of its own (grpc.SetHeader): none of the decider's
// do; a streaming one can.
package grpcserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluicehq/sluice/internal/decision"
)

// MaxStreams bounds the calls in flight on one connection. A client with
// more to send, Envoy's connection pool for one, opens another connection.
const MaxStreams = 1000

// maxMessage is the largest request message a call may send, as
// grpc-go's MaxRecvMsgSize.
const maxMessage = 1 << 20

// keepaliveMinTime lets a client keep its connections alive with HTTP/2
// PINGs as often as every 10 s, calls in flight or not: Envoy's
// connection_keepalive on its rate limit cluster, say. A client that pings
// faster, three times in a row, is sent away (GOAWAY ENHANCE_YOUR_CALM,
// "too_many_pings"), as grpc-go's servers do.
const keepaliveMinTime = 10 * time.Second

// Server is the decider's gRPC server. It is a grpc.ServiceRegistrar:
// the generated Register…Server functions register services on it.
type Server struct {
	svc         *decision.Service
	tls         *tls.Config
	maxAge      time.Duration
	maxAgeGrace time.Duration
	pingMinTime time.Duration

	methods  map[string]*method // by full method name, "/package.Service/Method"
	services map[string]grpc.ServiceInfo

	workers workers // run unary calls

	mu       sync.Mutex
	lns      map[net.Listener]struct{}
	conns    map[*conn]struct{}
	stopping bool
	conndone sync.WaitGroup
	stopOnce sync.Once
}

// method is one registered method and the service that implements it.
type method struct {
	impl   any
	unary  grpc.MethodHandler // nil for a streaming method
	stream *grpc.StreamDesc
	door   bool // a check door may refuse before its message is read
}

// Option configures a Server.
type Option func(*Server)

// WithTLS serves TLS (ALPN "h2") with cfg.
func WithTLS(cfg *tls.Config) Option {
	return func(s *Server) {
		c := cfg.Clone()
		c.NextProtos = []string{"h2"}
		s.tls = c
	}
}

// WithMaxConnectionAge sends a connection away (GOAWAY) once it is age old,
// give or take 10%, so that clients spread over new deciders, and closes
// it grace later.
func WithMaxConnectionAge(age, grace time.Duration) Option {
	return func(s *Server) { s.maxAge, s.maxAgeGrace = age, grace }
}

// NewServer returns the decider's gRPC server, with server reflection
// and no other service: each protocol registers its own on it. A panic in
// a call is answered Unknown, recorded by svc; a request that is not its
// call's message is answered InvalidArgument.
func NewServer(svc decision.Service, opts ...Option) *Server {
	s := &Server{svc: &svc, pingMinTime: keepaliveMinTime, methods: map[string]*method{}, services: map[string]grpc.ServiceInfo{},
		lns: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}}
	for _, o := range opts {
		o(s)
	}
	reflection.Register(s) // grpcurl and similar tools need no .proto files
	return s
}

// doorMethods are the calls door may refuse: sluice.v1.DecisionService's
// checks, whose callers read RESOURCE_EXHAUSTED as a rejection. Envoy's
// rate limit service is not among them: Envoy answers an error by its
// failure_mode_deny, which admits by default; its calls are shed after
// decoding instead, and answered by the overload policy.
var doorMethods = map[string]bool{"/sluice.v1.DecisionService/Check": true, "/sluice.v1.DecisionService/CheckBatch": true}

// RegisterService registers impl, which must implement desc.HandlerType,
// for desc's methods. It panics on a second registration of a service, as
// grpc-go does.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	if impl != nil {
		ht := reflect.TypeOf(desc.HandlerType).Elem()
		if !reflect.TypeOf(impl).Implements(ht) {
			panic(fmt.Sprintf("grpcserve: %T does not implement %v", impl, ht))
		}
	}
	if _, ok := s.services[desc.ServiceName]; ok {
		panic("grpcserve: a second registration of " + desc.ServiceName)
	}
	info := grpc.ServiceInfo{Metadata: desc.Metadata}
	for i := range desc.Methods {
		m := &desc.Methods[i]
		name := "/" + desc.ServiceName + "/" + m.MethodName
		s.methods[name] = &method{impl: impl, unary: m.Handler, door: doorMethods[name]}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: m.MethodName})
	}
	for i := range desc.Streams {
		d := &desc.Streams[i]
		s.methods["/"+desc.ServiceName+"/"+d.StreamName] = &method{impl: impl, stream: d}
		info.Methods = append(info.Methods, grpc.MethodInfo{Name: d.StreamName, IsClientStream: d.ClientStreams, IsServerStream: d.ServerStreams})
	}
	s.services[desc.ServiceName] = info
}

// GetServiceInfo describes the registered services, for server reflection.
func (s *Server) GetServiceInfo() map[string]grpc.ServiceInfo { return s.services }

// ErrServerStopped is what Serve returns once the server has stopped.
var ErrServerStopped = errors.New("grpcserve: the server has stopped")

// Serve accepts connections on ln until the server stops, and serves
// each. It always returns an error: ErrServerStopped after a stop.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		ln.Close()
		return ErrServerStopped
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			if stopping {
				return ErrServerStopped
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay) // a full file table: try again, slowly
				continue
			}
			return err
		}
		delay = 0
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			nc.Close()
			return ErrServerStopped
		}
		c := newConn(s, nc)
		s.conns[c] = struct{}{}
		s.conndone.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// forget drops an ended connection.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.conndone.Done()
}

// closeListeners stops accepting, for good.
func (s *Server) closeListeners() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	for ln := range s.lns {
		ln.Close()
	}
	clear(s.lns)
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

// GracefulStop stops accepting connections, sends every connection away
// (GOAWAY), lets the calls in flight finish, and returns once every
// connection has closed.
func (s *Server) GracefulStop() {
	for _, c := range s.closeListeners() {
		c.goAway()
	}
	s.conndone.Wait()
	s.stopOnce.Do(s.workers.stop)
}

// Stop closes every listener and connection at once; calls in flight are
// cancelled.
func (s *Server) Stop() {
	for _, c := range s.closeListeners() {
		c.shutdown()
	}
	s.conndone.Wait()
	s.stopOnce.Do(s.workers.stop)
}

// Stop stops s gracefully, letting calls in flight finish, but for at
// most grace: a long-lived stream (a health Watch, which clients hold open
// for as long as they like) would otherwise keep the decider from ever
// stopping. What is still open then is cut.
func Stop(s *Server, grace time.Duration) {
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

// dispatch runs a unary call whose request is whole.
func (s *Server) dispatch(st *stream) { s.workers.dispatch(st) }

// ServeHealth registers the standard grpc.health.v1.Health service on s,
// for Envoy's and Kubernetes' gRPC health checks: NOT_SERVING until ready
// is closed (the decider's first configuration), SERVING after, and
// NOT_SERVING again once stop is called, at shutdown, so that balancers
// drain the decider before it stops answering. It answers for the server
// as a whole ("") and for each of the services named.
func ServeHealth(s grpc.ServiceRegistrar, ready <-chan struct{}, services ...string) (stop func()) {
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

// connContext is the context every call of a connection starts from: its
// peer address, formatted once.
func connContext(nc net.Conn) context.Context {
	return decision.WithPeer(context.Background(), nc.RemoteAddr().String())
}
