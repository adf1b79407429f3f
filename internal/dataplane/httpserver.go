package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/h2sniff"
	"github.com/sluicehq/sluice/internal/rlheaders"
)

// HTTPServer serves a decider's HTTP port with two servers. HTTP/1.1 goes
// to fasthttp, which answers POST /v1/check and POST /shouldAllowRequest
// itself; a connection whose request is anything else (Connect over
// HTTP/1.1, /metrics, a check from a browser, whose CORS lives in next) is
// handed to net/http with that request put back in front, and net/http
// serves it with next from then on, with all of net/http's semantics
// (streaming, the request's context, upgrades). Connections that open with
// HTTP/2's preface (gRPC and Connect without TLS) go to net/http at once.
//
// Why two: under 50 keep-alive clients on two cores, net/http spent 22–31
// µs of CPU per request on a handler that did nothing, fasthttp 13.5 µs,
// and a strict decision costs the decider about 30 µs besides — net/http
// alone held POST /v1/check under the 40,000 decisions/s it is meant to
// reach (docs/benchmarks.md).
type HTTPServer struct {
	fast *fasthttp.Server
	std  *http.Server
	// toStd is the HTTP/2 side of the split port, where connections handed
	// over by fasthttp join those of the preface (set by Serve).
	toStd atomic.Pointer[h2sniff.Listener]
}

// Timeouts of HTTPServer's HTTP/1.1 connections.
const (
	httpReadTimeout = 10 * time.Second // a request's headers and body
	httpIdleTimeout = 2 * time.Minute  // between requests of a kept-alive connection
	// httpHeaderBytes bounds an HTTP/1.1 request's line and headers (the
	// read buffer of each connection).
	httpHeaderBytes = 16 << 10
)

// NewHTTPServer returns the server of cfg's check routes and of next.
func NewHTTPServer(cfg decision.Service, next http.Handler) *HTTPServer {
	h := newHTTPAPI(cfg)
	s := &HTTPServer{}
	s.std = &http.Server{Handler: next, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: httpIdleTimeout, Protocols: new(http.Protocols)}
	s.std.Protocols.SetHTTP1(true)
	s.std.Protocols.SetUnencryptedHTTP2(true)
	s.fast = &fasthttp.Server{
		Handler: recoverFast(&h.cfg, func(ctx *fasthttp.RequestCtx) {
			if ctx.IsPost() && len(ctx.Request.Header.Peek("Origin")) == 0 {
				switch string(ctx.Path()) {
				case "/v1/check":
					h.check(&fastExchange{ctx})
					return
				case "/shouldAllowRequest":
					h.shouldAllow(&fastExchange{ctx})
					return
				case "/v1/reset":
					h.reset(&fastExchange{ctx})
					return
				case UnkeyLimitPath:
					h.unkeyLimit(&fastExchange{ctx})
					return
				case GubernatorLimitsPath:
					h.gubernatorLimits(&fastExchange{ctx})
					return
				}
			}
			s.handOff(ctx)
		}),
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) {
			var ex exchange = &fastExchange{ctx}
			switch string(ctx.Path()) { // the compatible APIs answer in their own envelopes
			case UnkeyLimitPath:
				ex = unkeyExchange{ex}
			case GubernatorLimitsPath:
				ex = gatewayExchange{ex}
			}
			var small *fasthttp.ErrSmallBuffer
			var ne net.Error
			switch {
			case errors.Is(err, fasthttp.ErrBodyTooLarge):
				h.tooLarge(ex)
			case errors.As(err, &small):
				replyProblem(ex, http.StatusRequestHeaderFieldsTooLarge, "Request headers too large",
					fmt.Sprintf("the request's headers exceed %d bytes", httpHeaderBytes), nil)
			case errors.As(err, &ne) && ne.Timeout():
				replyProblem(ex, http.StatusRequestTimeout, "Request timeout", "the request did not arrive in time", nil)
			default:
				replyProblem(ex, http.StatusBadRequest, "Malformed request", "the request is not valid HTTP", nil)
			}
		},
		ReadBufferSize:        httpHeaderBytes,
		MaxRequestBodySize:    int(h.cfg.MaxBodyBytes),
		ReadTimeout:           httpReadTimeout,
		IdleTimeout:           httpIdleTimeout,
		NoDefaultServerHeader: true,
		KeepHijackedConns:     true, // handed to net/http, which closes them
		Logger:                debugLogger{h.cfg.Logger},
		SecureErrorLogMessage: true, // its errors would quote the request, keys and all
	}
	return s
}

// handOff gives ctx's connection to net/http, the request fasthttp has
// read put back in front of it: net/http answers it and serves the
// connection from then on.
func (s *HTTPServer) handOff(ctx *fasthttp.RequestCtx) {
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
		replyProblem(&fastExchange{ctx}, http.StatusBadRequest, "Malformed request", "the request could not be passed on", nil)
		return
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) { to.Hand(h2sniff.Unread(c, head.Bytes())) })
}

// Serve serves ln until Shutdown, then returns http.ErrServerClosed, as
// http.Server.Serve does.
func (s *HTTPServer) Serve(ln net.Listener) error {
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
func (s *HTTPServer) Shutdown(ctx context.Context) error {
	var wg sync.WaitGroup
	var stdErr, fastErr error
	wg.Go(func() { stdErr = s.std.Shutdown(ctx) })
	wg.Go(func() { fastErr = s.fast.ShutdownWithContext(ctx) })
	wg.Wait()
	return errors.Join(stdErr, fastErr)
}

// fastExchange is an exchange on fasthttp. Its request's bytes are only
// valid until the handler returns, which is when the decision is made.
type fastExchange struct{ ctx *fasthttp.RequestCtx }

// context is the background: fasthttp does not tell a handler that its
// client went away (its RequestCtx's Done is the server's shutdown).
func (e *fastExchange) context() context.Context { return context.Background() }

func (e *fastExchange) header(key string) string {
	return string(e.ctx.Request.Header.Peek(key))
}

func (e *fastExchange) peer() string { return e.ctx.RemoteAddr().String() }

func (e *fastExchange) authorization() string {
	return string(e.ctx.Request.Header.Peek("Authorization"))
}

// decode decodes the body, read whole by the server within its bound.
func (e *fastExchange) decode(v any, maxBytes int64) error {
	body := e.ctx.PostBody()
	if int64(len(body)) > maxBytes {
		return errTooLarge
	}
	if err := refuseNonObject(body); err != nil {
		return err
	}
	if c, ok := v.(*checkBody); ok && c.parse(body) {
		return nil
	}
	return jsonv2.Unmarshal(body, v, decodeOptions)
}

// rateHeaders builds the values in a buffer of its own, which fasthttp
// copies: no allocation for the commonest decisions, of a few rules.
func (e *fastExchange) rateHeaders(dec decide.Decision, style rlheaders.Style) {
	var rules [4]rlheaders.Rule
	var buf [256]byte
	b, keys, ends, n := rlheaders.Append(buf[:0], style, decision.AppendHeaderRules(rules[:0], dec), dec.Deciding, dec.Allowed)
	from := 0
	for i := range n {
		e.ctx.Response.Header.SetCanonical(keys[i], b[from:ends[i]])
		from = ends[i]
	}
	if dec.Degraded {
		e.ctx.Response.Header.Set(decision.DegradedHeader, dec.Degradation.Reason())
	}
}

func (e *fastExchange) reply(status int, contentType string, v any) {
	e.ctx.SetStatusCode(status)
	e.ctx.SetContentType(contentType)
	_ = json.NewEncoder(e.ctx).Encode(v)
}

func (e *fastExchange) write(status int, contentType string, body []byte) {
	e.ctx.SetStatusCode(status)
	e.ctx.SetContentType(contentType)
	e.ctx.SetBody(body)
}

// debugLogger takes fasthttp's log lines (a connection's read errors and
// the like) at debug level.
type debugLogger struct{ l *slog.Logger }

func (d debugLogger) Printf(format string, args ...any) {
	d.l.Debug("http server: " + fmt.Sprintf(format, args...))
}
