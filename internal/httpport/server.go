package httpport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/internal/h2sniff"
)

// Server serves a decider's HTTP port with two servers. HTTP/1.1 goes
// to fasthttp, which answers the POST routes itself; a connection whose
// request is anything else (Connect over HTTP/1.1, /metrics, a check from
// a browser, whose CORS lives in next) is handed to net/http with that
// request put back in front, and net/http serves it with next from then
// on, with all of net/http's semantics (streaming, the request's context,
// upgrades). Connections that open with HTTP/2's preface (gRPC and Connect
// without TLS) go to net/http at once.
//
// Why two: net/http spends about twice fasthttp's CPU per request on a
// handler that does nothing, as much again as a strict decision costs the
// decider, and alone it held POST /v1/check under the rate it is meant to
// reach (docs/benchmarks.md has the figures).
type Server struct {
	fast *fasthttp.Server
	std  *http.Server
	// toStd is the HTTP/2 side of the split port, where connections handed
	// over by fasthttp join those of the preface (set by Serve).
	toStd atomic.Pointer[h2sniff.Listener]
}

// ReadTimeout is how long a check request's body has to arrive, on
// either server.
const ReadTimeout = 10 * time.Second

// readTimeout is ReadTimeout on net/http (shortened by tests).
var readTimeout = ReadTimeout

// Timeouts of Server's HTTP/1.1 connections.
const (
	httpReadTimeout = ReadTimeout     // a request's headers and body
	httpIdleTimeout = 2 * time.Minute // between requests of a kept-alive connection
	// httpHeaderBytes bounds an HTTP/1.1 request's line and headers (the
	// read buffer of each connection).
	httpHeaderBytes = 16 << 10
)

// NewServer returns the server of routes, over a's decisions, and of next.
func NewServer(a *API, routes []Route, next http.Handler) *Server {
	return newServer(a, routes, next, true)
}

// NewStdServer is NewServer with fasthttp answering no route itself: it
// reads a connection's first request, hands the connection to net/http,
// and next serves everything, the check routes included (mounted on it
// by Mount). A switch for the tuning NewServer is (the decider's
// -http-fasthttp): net/http alone costs more CPU per check, and serves
// every Go HTTP feature.
func NewStdServer(a *API, routes []Route, next http.Handler) *Server {
	return newServer(a, routes, next, false)
}

func newServer(a *API, routes []Route, next http.Handler, fast bool) *Server {
	posts := map[string]*Route{}
	paths := map[string]*Route{}
	for i := range routes {
		rt := &routes[i]
		paths[rt.Path] = rt
		if rt.Method == http.MethodPost && fast {
			posts[rt.Path] = rt
		}
	}
	s := &Server{}
	s.std = &http.Server{Handler: next, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: httpIdleTimeout, Protocols: new(http.Protocols)}
	s.std.Protocols.SetHTTP1(true)
	s.std.Protocols.SetUnencryptedHTTP2(true)
	s.fast = &fasthttp.Server{
		Handler: recoverFast(a, func(ctx *fasthttp.RequestCtx) {
			if ctx.IsPost() && len(ctx.Request.Header.Peek("Origin")) == 0 {
				if rt := posts[string(ctx.Path())]; rt != nil {
					rt.Serve(&fastExchange{ctx})
					return
				}
			}
			s.handOff(ctx)
		}),
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			var ex Exchange = &fastExchange{ctx}
			if rt := paths[string(ctx.Path())]; rt != nil && rt.Envelope != nil { // a protocol answering in its own envelope
				ex = rt.Envelope(ex)
			}
			var small *fasthttp.ErrSmallBuffer
			var ne net.Error
			switch {
			case errors.Is(err, fasthttp.ErrBodyTooLarge):
				a.TooLarge(ex)
			case errors.As(err, &small):
				ReplyProblem(ex, http.StatusRequestHeaderFieldsTooLarge, "Request headers too large",
					fmt.Sprintf("the request's headers exceed %d bytes", httpHeaderBytes), nil)
			case errors.As(err, &ne) && ne.Timeout():
				ReplyProblem(ex, http.StatusRequestTimeout, "Request timeout", "the request did not arrive in time", nil)
			default:
				ReplyProblem(ex, http.StatusBadRequest, "Malformed request", "the request is not valid HTTP", nil)
			}
		},
		ReadBufferSize:        httpHeaderBytes,
		MaxRequestBodySize:    int(a.MaxBodyBytes),
		ReadTimeout:           httpReadTimeout,
		IdleTimeout:           httpIdleTimeout,
		NoDefaultServerHeader: true,
		KeepHijackedConns:     true, // handed to net/http, which closes them
		Logger:                debugLogger{a.Logger},
		SecureErrorLogMessage: true, // its errors would quote the request, keys and all
	}
	return s
}

// handOff gives ctx's connection to net/http, the request fasthttp has
// read put back in front of it: net/http answers it and serves the
// connection from then on.
func (s *Server) handOff(ctx *fasthttp.RequestCtx) {
	to := s.toStd.Load()
	if to == nil { // not serving a listener (a test calling the handler)
		ctx.Error("not served here", http.StatusNotFound)
		return
	}
	// The body was read whole, past any 100-continue: net/http must not
	// invite it again.
	ctx.Request.Header.Del("Expect")
	var head bytes.Buffer
	if _, err := ctx.Request.WriteTo(&head); err != nil {
		ReplyProblem(&fastExchange{ctx}, http.StatusBadRequest, "Malformed request", "the request could not be passed on", nil)
		return
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) { to.Hand(h2sniff.Unread(c, head.Bytes())) })
}

// Serve serves ln until Shutdown, then returns http.ErrServerClosed, as
// http.Server.Serve does.
func (s *Server) Serve(ln net.Listener) error {
	h2, rest := h2sniff.Split(ln, s.std.ReadHeaderTimeout)
	s.toStd.Store(h2)
	errc := make(chan error, 2)
	go func() { errc <- s.std.Serve(h2) }()
	go func() {
		err := s.fast.Serve(rest)
		if err == nil { // fasthttp's answer to Shutdown
			err = http.ErrServerClosed
		}
		errc <- err
	}()
	first := <-errc
	if !errors.Is(first, http.ErrServerClosed) { // one failed: stop the other
		_ = h2.Close()
		_ = rest.Close()
	}
	second := <-errc
	if !errors.Is(first, http.ErrServerClosed) {
		return first
	}
	if !errors.Is(second, http.ErrServerClosed) && !errors.Is(second, net.ErrClosed) {
		return second
	}
	return http.ErrServerClosed
}

// Shutdown stops both servers gracefully: no new connections, and open
// ones closed once idle, or when ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	var wg sync.WaitGroup
	var stdErr, fastErr error
	wg.Go(func() { stdErr = s.std.Shutdown(ctx) })
	wg.Go(func() { fastErr = s.fast.ShutdownWithContext(ctx) })
	wg.Wait()
	return errors.Join(stdErr, fastErr)
}

// debugLogger takes fasthttp's log lines (a connection's read errors and
// the like) at debug level.
type debugLogger struct{ l *slog.Logger }

func (d debugLogger) Printf(format string, args ...any) {
	d.l.Debug("http server: " + fmt.Sprintf(format, args...))
}

// FastHandler is the handler of s's fasthttp side, for in-process
// benchmarks and fuzzing.
func (s *Server) FastHandler() fasthttp.RequestHandler { return s.fast.Handler }
