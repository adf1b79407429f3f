package grpcserve

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the client's compressor
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/decision"
)

// echo is a test service: Echo answers a message of the size asked,
// repeating the request's first byte, with the request's metadata value
// "x-echo" in front; Wait waits for its context to end and answers its
// error; Count (a bidirectional stream) answers each message with the
// count of messages so far.
type echo interface{}

type echoServer struct{ waited chan waited }

// waited is how a Wait call's context ended, and whether it had a
// deadline.
type waited struct {
	err      error
	deadline bool
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*echo)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.BytesValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		md, _ := metadata.FromIncomingContext(ctx)
		n := 1
		if len(in.Value) > 1 {
			n = int(in.Value[1])<<16 | int(in.Value[2])<<8 | int(in.Value[3])
		}
		out := []byte(strings.Join(md["x-echo"], ","))
		return wrapperspb.Bytes(append(out, bytes.Repeat(in.Value[:1], n)...)), nil
	}}, {MethodName: "Wait", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		if err := dec(new(wrapperspb.BytesValue)); err != nil {
			return nil, err
		}
		<-ctx.Done()
		_, deadline := ctx.Deadline()
		srv.(*echoServer).waited <- waited{ctx.Err(), deadline}
		return nil, ctx.Err()
	}}, {MethodName: "Panic", Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		panic("a bug")
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Count", ServerStreams: true, ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
		if err := grpc.SetHeader(ss.Context(), metadata.Pairs("x-header", "h")); err != nil {
			return err
		}
		ss.SetTrailer(metadata.Pairs("x-trailer", "t"))
		for n := 1; ; n++ {
			if err := ss.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if err := ss.SendMsg(wrapperspb.Int64(int64(n))); err != nil {
				return err
			}
		}
	}}},
}

// serveEcho serves the echo service and returns a client connection
// with opts, and the service.
func serveEcho(t *testing.T, opts ...grpc.DialOption) (*grpc.ClientConn, *echoServer, *Server) {
	t.Helper()
	s := NewServer(decision.Service{})
	es := &echoServer{waited: make(chan waited, 1)}
	s.RegisterService(&echoDesc, es)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, es, s
}

// size is an Echo request for an answer of n bytes of b.
func size(b byte, n int) *wrapperspb.BytesValue {
	return wrapperspb.Bytes([]byte{b, byte(n >> 16), byte(n >> 8), byte(n)})
}

// An answer larger than the client's windows waits for them to open, and
// arrives whole; headers larger than a frame arrive in CONTINUATIONs;
// metadata reaches the handler; a compressed call is answered in kind.
func TestFlowControlAndHeaders(t *testing.T) {
	conn, _, _ := serveEcho(t, grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	long := strings.Repeat("v", 40<<10) // past one 16 KiB frame
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-echo", "a", "x-echo", "b", "x-long", long)
	for _, n := range []int{0, 1, 70 << 10, 900 << 10} {
		for _, opts := range [][]grpc.CallOption{nil, {grpc.UseCompressor("gzip")}} {
			out := new(wrapperspb.BytesValue)
			if err := conn.Invoke(ctx, "/test.Echo/Echo", size('z', n), out, opts...); err != nil {
				t.Fatalf("%d bytes, %v: %v", n, opts, err)
			}
			want := append([]byte("a,b"), bytes.Repeat([]byte("z"), n)...)
			if !bytes.Equal(out.Value, want) {
				t.Fatalf("%d bytes: %d answered, want %d", n, len(out.Value), len(want))
			}
		}
	}
}

// Calls of one connection share metadata only where it is the same: each
// call's handler reads its own, whatever the previous call sent.
func TestEachCallItsOwnMetadata(t *testing.T) {
	conn, _, _ := serveEcho(t)
	for _, vals := range [][]string{{"a"}, {"a"}, {"b"}, {"a", "b"}, {"a", "b"}, {"a"}, nil, {"a"}, {"ab"}} {
		ctx := context.Background()
		for _, v := range vals {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-echo", v)
		}
		out := new(wrapperspb.BytesValue)
		if err := conn.Invoke(ctx, "/test.Echo/Echo", size('z', 0), out); err != nil {
			t.Fatal(err)
		}
		if got, want := string(out.Value), strings.Join(vals, ","); got != want {
			t.Fatalf("sent %q: the handler read %q", vals, got)
		}
	}
}

// A request past 1 MiB is refused InvalidArgument, and the connection
// goes on serving.
func TestRequestTooLarge(t *testing.T) {
	conn, _, _ := serveEcho(t, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(4<<20)))
	big := wrapperspb.Bytes(bytes.Repeat([]byte("x"), maxMessage+10))
	err := conn.Invoke(context.Background(), "/test.Echo/Echo", big, new(wrapperspb.BytesValue))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a request of %d bytes: %v, want InvalidArgument", maxMessage+10, err)
	}
	if err := conn.Invoke(context.Background(), "/test.Echo/Echo", size('a', 3), new(wrapperspb.BytesValue)); err != nil {
		t.Fatalf("the next call: %v", err)
	}
}

// Unknown methods are Unimplemented; a panic is the call's Internal
// error, not the server's end; a deadline reaches the handler's context.
func TestErrors(t *testing.T) {
	conn, es, _ := serveEcho(t)
	if err := conn.Invoke(context.Background(), "/test.Echo/Nope", size('a', 1), new(wrapperspb.BytesValue)); status.Code(err) != codes.Unimplemented {
		t.Fatalf("an unknown method: %v", err)
	}
	if err := conn.Invoke(context.Background(), "/test.Echo/Panic", size('a', 1), new(wrapperspb.BytesValue)); status.Code(err) != codes.Internal {
		t.Fatalf("a panic: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := conn.Invoke(ctx, "/test.Echo/Wait", size('a', 1), new(wrapperspb.BytesValue)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call past its deadline: %v", err)
	}
	select {
	case w := <-es.waited:
		// The client resets the call as its deadline passes: either
		// ends the handler's context.
		if !w.deadline || w.err == nil {
			t.Fatalf("the handler's context ended with %v, deadline %v", w.err, w.deadline)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context never ended")
	}
	if err := conn.Invoke(context.Background(), "/test.Echo/Echo", size('a', 1), new(wrapperspb.BytesValue)); err != nil {
		t.Fatalf("after the errors: %v", err)
	}
}

// A bidirectional stream: messages both ways, headers and trailers the
// handler set.
func TestStream(t *testing.T) {
	conn, _, _ := serveEcho(t)
	cs, err := conn.NewStream(context.Background(), &echoDesc.Streams[0], "/test.Echo/Count")
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 3; i++ {
		if err := cs.SendMsg(size('a', 1)); err != nil {
			t.Fatal(err)
		}
		n := new(wrapperspb.Int64Value)
		if err := cs.RecvMsg(n); err != nil || n.Value != i {
			t.Fatalf("message %d: %v %v", i, n, err)
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(new(wrapperspb.Int64Value)); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v", err)
	}
	if h, _ := cs.Header(); h.Get("x-header")[0] != "h" {
		t.Fatalf("headers %v", h)
	}
	if tr := cs.Trailer(); len(tr.Get("x-trailer")) != 1 {
		t.Fatalf("trailers %v", tr)
	}
}

// GracefulStop sends clients away and lets a call in flight finish.
func TestGracefulStop(t *testing.T) {
	conn, es, s := serveEcho(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- conn.Invoke(ctx, "/test.Echo/Wait", size('a', 1), new(wrapperspb.BytesValue)) }()
	// Wait until the call is in flight, then stop.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := 0
		for c := range s.conns {
			c.mu.Lock()
			n += len(c.streams)
			c.mu.Unlock()
		}
		s.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call never arrived")
		}
	}
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("GracefulStop did not wait for the call in flight")
	case <-time.After(100 * time.Millisecond):
	}
	cancel() // the client resets the call: its handler's context ends
	if w := <-es.waited; !errors.Is(w.err, context.Canceled) {
		t.Fatalf("the handler's context ended with %v", w.err)
	}
	<-errc
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("GracefulStop never returned")
	}
}

// FuzzServerFrames: whatever a client sends after the preface, the server
// neither panics nor hangs: it answers, or closes the connection.
func FuzzServerFrames(f *testing.F) {
	var settings bytes.Buffer
	fr := http2.NewFramer(&settings, nil)
	_ = fr.WriteSettings()
	_ = fr.WriteWindowUpdate(0, 1000)
	_ = fr.WritePing(false, [8]byte{1})
	_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x83, 0x86, 0x84}, EndHeaders: true})
	_ = fr.WriteData(1, true, []byte{0, 0, 0, 0, 1, 0x0a})
	f.Add(settings.Bytes())
	f.Add([]byte{0, 0, 1, 9, 4, 0, 0, 0, 1, 0x88})
	s := NewServer(decision.Service{})
	s.RegisterService(&echoDesc, &echoServer{waited: make(chan waited, 100)})
	f.Fuzz(func(t *testing.T, b []byte) {
		client, server := net.Pipe()
		c := newConn(s, server)
		s.conndone.Add(1)
		done := make(chan struct{})
		go func() { c.serve(); close(done) }()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = client.Write([]byte(http2.ClientPreface))
		_, _ = client.Write(b)
		client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the connection did not end after its client closed")
		}
	})
}

// grpc-timeout in each of its units; anything else is refused.
func TestParseTimeout(t *testing.T) {
	for v, want := range map[string]time.Duration{"1H": time.Hour, "2M": 2 * time.Minute, "3S": 3 * time.Second,
		"20m": 20 * time.Millisecond, "49999u": 49999 * time.Microsecond, "7n": 7, "99999999H": 1<<63 - 1} {
		if got, ok := parseTimeout(v); !ok || got != want {
			t.Errorf("%q: %v %v, want %v", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "5", "S", "1s", "-1S", "123456789S", "1.5S"} {
		if _, ok := parseTimeout(v); ok {
			t.Errorf("%q was taken", v)
		}
	}
}

// A call's metadata holds its headers and :authority, not the other
// pseudo-headers nor gRPC's transport fields.
func TestInMetadata(t *testing.T) {
	for name, want := range map[string]bool{"authorization": true, "content-type": true, "user-agent": true, "x-b3-traceid-bin": true,
		":authority": true, ":path": false, ":method": false, "te": false, "grpc-timeout": false, "grpc-encoding": false} {
		if got := inMetadata(name); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}
