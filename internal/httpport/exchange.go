// Package httpport is the decider's HTTP port: what every protocol's HTTP
// routes share, whichever protocol they speak. The exchange (one request
// and its answer, on fasthttp or net/http), problem answers, the route
// table that protocols fill, and the server that serves it.
package httpport

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/rlheaders"
)

// Exchange is one HTTP request to a check route and its answer.
type Exchange interface {
	Context() context.Context
	Authorization() string
	// Header reads a request header (trace context).
	Header(key string) string
	// Peer is the caller's address, ip:port.
	Peer() string
	// Decode reads the body, one JSON object of at most maxBytes, into v;
	// ErrTooLarge when it is longer.
	Decode(v any, maxBytes int64) error
	// RateHeaders sets the rate limit headers of dec in style (see
	// SetHeaders).
	RateHeaders(dec decide.Decision, style rlheaders.Style)
	// Reply answers with status and v as JSON.
	Reply(status int, contentType string, v any)
	// Write answers with status and body.
	Write(status int, contentType string, body []byte)
}

// FastParser is a body that parses its commonest forms itself, faster than
// reflection: Decode on fasthttp tries ParseFast first, and decodes as
// JSON when it returns false.
type FastParser interface {
	ParseFast(body []byte) bool
}

// ErrTooLarge is a body longer than the bound.
var ErrTooLarge = errors.New("request body too large")

// DecodeOptions are how bodies are decoded: field names match as encoding/json matches them (case
// aside); unknown ones, duplicates and invalid UTF-8 are errors. Bodies
// are decoded with the module of Go's encoding/json/v2 (experimental in
// the standard library as of Go 1.26): a third of encoding/json's CPU for
// a check body.
var DecodeOptions = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true), jsonv2.MatchCaseInsensitiveNames(true))

// Std is the exchange of a net/http request.
func Std(w http.ResponseWriter, r *http.Request) Exchange { return &stdExchange{w, r} }

// stdExchange is an exchange on net/http.
type stdExchange struct {
	w http.ResponseWriter
	r *http.Request
}

func (e *stdExchange) Context() context.Context { return e.r.Context() }
func (e *stdExchange) Authorization() string    { return e.r.Header.Get("Authorization") }
func (e *stdExchange) Header(key string) string { return e.r.Header.Get(key) }
func (e *stdExchange) Peer() string             { return e.r.RemoteAddr }

// Decode reads one JSON object; unknown fields and trailing data are
// errors. The body has ReadTimeout to arrive, as on fasthttp: a body sent
// slowly would otherwise hold its goroutine and connection for as long as
// its client likes.
func (e *stdExchange) Decode(v any, maxBytes int64) error {
	rc := http.NewResponseController(e.w)
	_ = rc.SetReadDeadline(time.Now().Add(readTimeout)) // unsupported by a test's recorder: no deadline
	body, err := io.ReadAll(http.MaxBytesReader(e.w, e.r.Body, maxBytes))
	if err != nil {
		// The rest of the body is not waited for: the connection closes
		// after the answer.
		e.w.Header().Set("Connection", "close")
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			return ErrTooLarge
		}
		return err
	}
	_ = rc.SetReadDeadline(time.Time{})
	if err := refuseNonObject(body); err != nil {
		return err
	}
	return jsonv2.Unmarshal(body, v, DecodeOptions)
}

func (e *stdExchange) RateHeaders(dec decide.Decision, style rlheaders.Style) {
	SetHeaders(e.w.Header(), style, dec)
}

func (e *stdExchange) Write(status int, contentType string, body []byte) {
	e.w.Header().Set("Content-Type", contentType)
	e.w.WriteHeader(status)
	_, _ = e.w.Write(body)
}

func (e *stdExchange) Reply(status int, contentType string, v any) {
	WriteJSON(e.w, status, contentType, v)
}

// fastExchange is an exchange on fasthttp. Its request's bytes are only
// valid until the handler returns, which is when the decision is made.
type fastExchange struct{ ctx *fasthttp.RequestCtx }

// Context is the background: fasthttp does not tell a handler that its
// client went away (its RequestCtx's Done is the server's shutdown).
func (e *fastExchange) Context() context.Context { return context.Background() }

func (e *fastExchange) Header(key string) string {
	return string(e.ctx.Request.Header.Peek(key))
}

func (e *fastExchange) Peer() string { return e.ctx.RemoteAddr().String() }

func (e *fastExchange) Authorization() string {
	return string(e.ctx.Request.Header.Peek("Authorization"))
}

// Decode decodes the body, read whole by the server within its bound.
func (e *fastExchange) Decode(v any, maxBytes int64) error {
	body := e.ctx.PostBody()
	if int64(len(body)) > maxBytes {
		return ErrTooLarge
	}
	if err := refuseNonObject(body); err != nil {
		return err
	}
	if p, ok := v.(FastParser); ok && p.ParseFast(body) {
		return nil
	}
	return jsonv2.Unmarshal(body, v, DecodeOptions)
}

// RateHeaders builds the values in a buffer of its own, which fasthttp
// copies: no allocation for the commonest decisions, of a few rules.
func (e *fastExchange) RateHeaders(dec decide.Decision, style rlheaders.Style) {
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
	if unruled(dec) {
		e.ctx.Response.Header.Set("Retry-After", "1")
	}
}

// unruled reports whether dec is a rejection no rule made (the door's,
// decision.DoorDecision): its answer says to retry in a second.
func unruled(dec decide.Decision) bool { return !dec.Allowed && dec.Deciding < 0 && dec.Degraded }

func (e *fastExchange) Reply(status int, contentType string, v any) {
	e.ctx.SetStatusCode(status)
	e.ctx.SetContentType(contentType)
	_ = json.NewEncoder(e.ctx).Encode(v)
}

func (e *fastExchange) Write(status int, contentType string, body []byte) {
	e.ctx.SetStatusCode(status)
	e.ctx.SetContentType(contentType)
	e.ctx.SetBody(body)
}

// errNotObject is a body that is JSON but not an object (null, a number,
// an array): no request's.
var errNotObject = errors.New("want a JSON object")

// refuseNonObject refuses a body whose JSON is not an object: decoding
// null into a request would leave it empty, a check of nothing, and
// count it.
func refuseNonObject(body []byte) error {
	for _, b := range body {
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return nil
		}
		return errNotObject
	}
	return errNotObject
}

// WriteJSON answers w with status and v as JSON.
func WriteJSON(w http.ResponseWriter, status int, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// SetHeaders sets the rate limit headers of dec in style (see rlheaders):
// those of the deciding rule, the one that denied, not one that passed.
func SetHeaders(h http.Header, style rlheaders.Style, dec decide.Decision) {
	rlheaders.Set(h, style, decision.HeaderRules(dec), dec.Deciding, dec.Allowed)
	if dec.Degraded {
		h.Set(decision.DegradedHeader, dec.Degradation.Reason())
	}
	if unruled(dec) {
		h.Set("Retry-After", "1")
	}
}
