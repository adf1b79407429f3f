// Package dataplane is a decider's wire protocols over the decision
// service (internal/decision): the HTTP check API on fasthttp and
// net/http, Connect's and gRPC's DecisionService, Envoy's rate limit
// service, gubernator's and Unkey's APIs, and the reverse proxy.
package dataplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/internal/days"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/rlheaders"
)

// DefaultMaxBodyBytes bounds a check request's body.
const DefaultMaxBodyBytes = 64 << 10

// NewHTTPHandler returns the handler of POST /v1/check, POST /v1/reset,
// the seed-compatible POST /shouldAllowRequest, Unkey's POST
// /v2/ratelimit.limit and gubernator's POST /v1/GetRateLimits and GET
// /v1/HealthCheck.
func NewHTTPHandler(cfg decision.Service) http.Handler {
	h := newHTTPAPI(cfg)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) { h.check(&stdExchange{w, r}) })
	mux.HandleFunc("POST /shouldAllowRequest", func(w http.ResponseWriter, r *http.Request) { h.shouldAllow(&stdExchange{w, r}) })
	mux.HandleFunc("POST /v1/reset", func(w http.ResponseWriter, r *http.Request) { h.reset(&stdExchange{w, r}) })
	mux.HandleFunc("POST "+UnkeyLimitPath, func(w http.ResponseWriter, r *http.Request) { h.unkeyLimit(&stdExchange{w, r}) })
	mux.HandleFunc("POST "+GubernatorLimitsPath, func(w http.ResponseWriter, r *http.Request) { h.gubernatorLimits(&stdExchange{w, r}) })
	mux.HandleFunc("GET "+GubernatorHealthPath, gubernatorHealth)
	return mux
}

// MountHTTP routes the check API's paths of mux to h (NewHTTPHandler's,
// wrapped in CORS or not), browsers' preflights of them included.
func MountHTTP(mux *http.ServeMux, h http.Handler) {
	for _, p := range []string{"POST /v1/check", "OPTIONS /v1/check", "POST /v1/reset", "OPTIONS /v1/reset", "POST /shouldAllowRequest", "POST " + UnkeyLimitPath,
		"POST " + GubernatorLimitsPath, "GET " + GubernatorHealthPath} {
		mux.Handle(p, h)
	}
	// Another method on these paths is 405 with Allow, even where mux has a
	// catch-all (sluice dev's control plane) that would answer 404.
	for path, allow := range map[string]string{"/v1/check": "POST, OPTIONS", "/v1/reset": "POST, OPTIONS", "/shouldAllowRequest": "POST", UnkeyLimitPath: "POST",
		GubernatorLimitsPath: "POST", GubernatorHealthPath: "GET"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			replyProblem(&stdExchange{w, r}, http.StatusMethodNotAllowed, "Method Not Allowed", r.Method+" "+path+": use "+allow, nil)
		})
	}
}

func newHTTPAPI(cfg decision.Service) *httpAPI {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &httpAPI{cfg: cfg}
}

// httpAPI answers the check routes over an exchange, whichever HTTP server
// carries it.
type httpAPI struct{ cfg decision.Service }

// exchange is one HTTP request to a check route and its answer.
type exchange interface {
	context() context.Context
	authorization() string
	// header reads a request header (trace context).
	header(key string) string
	// peer is the caller's address, ip:port.
	peer() string
	// decode reads the body, one JSON object of at most maxBytes, into v;
	// errTooLarge when it is longer.
	decode(v any, maxBytes int64) error
	// rateHeaders sets the rate limit headers of dec in style (see
	// SetHeaders).
	rateHeaders(dec decide.Decision, style rlheaders.Style)
	// reply answers with status and v as JSON.
	reply(status int, contentType string, v any)
	// write answers with status and body.
	write(status int, contentType string, body []byte)
}

// errTooLarge is a body longer than the bound.
var errTooLarge = errors.New("request body too large")

// checkBody is the JSON of POST /v1/check.
type checkBody struct {
	Tier        string            `json:"tier"`
	Descriptors map[string]string `json:"descriptors"`
	Cost        int64             `json:"cost"`
	// Lease names a concurrency lease: taken by a check, ended by a check
	// with release set.
	Lease   string `json:"lease"`
	Release bool   `json:"release"`
	// Peek asks without consuming (decide.Request.Peek).
	Peek bool `json:"peek"`
	// Limit decides the request by this limit alone (decide.Request.Limit).
	Limit *limitJSON `json:"limit"`
	// fast is set when parse read the body, and parsed holds the
	// descriptors, sorted, in place of Descriptors.
	fast   bool
	parsed policy.Descriptors
}

// limitJSON is a check's own limit: requests per window, a duration such
// as "1m" or "3600s", counted by algorithm (a name; "": the fixed
// window).
type limitJSON struct {
	Requests  int64  `json:"requests"`
	Window    string `json:"window"`
	Algorithm string `json:"algorithm"`
}

// requestLimit is l as the decider takes it, or the field error of its
// window.
func (l *limitJSON) requestLimit() (*decide.RequestLimit, error) {
	if l == nil {
		return nil, nil
	}
	w, err := days.ParseDuration(l.Window)
	if err != nil {
		return nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid check",
			Fields: []policy.FieldError{{Field: "limit.window", Description: `must be a duration such as "1m", "3600s" or "1d"`}}}
	}
	alg, err := decide.ParseRequestLimitAlgorithm(l.Algorithm)
	if err != nil {
		return nil, err
	}
	return &decide.RequestLimit{Requests: l.Requests, Window: w, Algorithm: alg}, nil
}

// descriptors are the body's descriptors, sorted by key.
func (c *checkBody) descriptors() policy.Descriptors {
	if c.fast {
		return c.parsed
	}
	return descriptorsOf(c.Descriptors)
}

// RuleJSON is one rule's answer in a check response.
type RuleJSON struct {
	Rule         string `json:"rule"`
	Allowed      bool   `json:"allowed"`
	Shadow       bool   `json:"shadow,omitempty"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS *int64 `json:"retry_after_ms,omitempty"` // absent when never admissible
	DelayMS      int64  `json:"delay_ms,omitempty"`
	// Message is, on a rejection, the rule's message for the client.
	Message string `json:"message,omitempty"`
	// Unenforced is set on a degraded decision's rule that nothing
	// counted (it answered open).
	Unenforced bool `json:"unenforced,omitempty"`
}

// CheckJSON is the body of a check response when the request is allowed.
type CheckJSON struct {
	Allowed       bool       `json:"allowed"`
	Rules         []RuleJSON `json:"rules"`
	ConfigVersion int64      `json:"config_version"`
	// Lease names the lease the request holds on the concurrency rules it
	// met: the request's, or the decider's new one, to end with a release.
	Lease string `json:"lease,omitempty"`
	// Degraded names why the shared store did not decide
	// (decide.Degradation.Reason): store_unavailable or overload.
	Degraded string `json:"degraded,omitempty"`
}

func (h *httpAPI) check(ex exchange) {
	var body checkBody
	c, ok := h.begin(ex, "check", &body)
	if !ok {
		return
	}
	req := decide.Request{Tier: body.Tier, Cost: body.Cost, Descriptors: body.descriptors(), Lease: LeaseID(body.Lease), Peek: body.Peek}
	var err error
	if req.Limit, err = body.Limit.requestLimit(); err != nil {
		h.fail(ex, err)
		return
	}
	if body.Release {
		if body.Lease == "" {
			h.fail(ex, &policy.Error{Code: policy.CodeInvalid, Message: "invalid release",
				Fields: []policy.FieldError{{Field: "lease", Description: "required to release a lease"}}})
			return
		}
		if err := h.cfg.Decider.Release(ex.context(), c, req); err != nil {
			h.fail(ex, err)
			return
		}
		ex.reply(http.StatusOK, "application/json", map[string]bool{"released": true})
		return
	}
	h.decide(ex, c, req, body.Lease, false)
}

// resetBody is the JSON of POST /v1/reset: the tier and descriptors of a
// check, which pick the rules and counters to reset.
type resetBody struct {
	Tier        string            `json:"tier"`
	Descriptors map[string]string `json:"descriptors"`
}

// ResetJSON is the body of a reset's answer: the names of the rules whose
// counters were reset.
type ResetJSON struct {
	Reset []string `json:"reset"`
}

func (h *httpAPI) reset(ex exchange) {
	var body resetBody
	c, ok := h.begin(ex, "reset", &body)
	if !ok {
		return
	}
	rules, err := h.cfg.Reset(ex.context(), c, decide.Request{Tier: body.Tier, Descriptors: descriptorsOf(body.Descriptors)})
	if err != nil {
		h.fail(ex, err)
		return
	}
	out := ResetJSON{Reset: make([]string, len(rules))}
	for i, r := range rules {
		out.Reset[i] = r.Name
	}
	ex.reply(http.StatusOK, "application/json", out)
}

// shouldAllowBody is the seed API's request. The timestamp is accepted for
// compatibility and not trusted: time comes from the decider's store.
type shouldAllowBody struct {
	ClientID  string `json:"clientId"`
	Timestamp any    `json:"timestamp"`
}

func (h *httpAPI) shouldAllow(ex exchange) {
	var body shouldAllowBody
	c, ok := h.begin(ex, "shouldAllowRequest", &body)
	if !ok {
		return
	}
	if body.ClientID == "" {
		h.fail(ex, &policy.Error{Code: policy.CodeInvalid, Message: "invalid check",
			Fields: []policy.FieldError{{Field: "clientId", Description: "required"}}})
		return
	}
	req := decide.Request{Descriptors: policy.Descriptors{{Key: policy.DefaultIdentifierKey, Value: body.ClientID}}}
	h.decide(ex, c, req, "", true)
}

// decide answers req; lease is the name of the lease it asks for.
func (h *httpAPI) decide(ex exchange, c *decide.Config, req decide.Request, lease string, seed bool) {
	dec, err := h.cfg.Decide(tracedExchange(&h.cfg, ex), c, req)
	if err != nil {
		h.fail(ex, err)
		return
	}
	// Yield once before answering. A decision made on the decider (local
	// counting, the deny cache) never blocks, and connection goroutines
	// that never block keep their thread until preempted: wrk's p99 on
	// POST /v1/check doubled without this (22 against 10–12 ms on a slower
	// machine; 11.6–11.9 against 6.5–7 ms here). It lives here, not in the
	// engine, because gRPC's handlers hand their answer to another
	// goroutine anyway: there the yield only cost 1.7 µs per decision
	// (interleaved runs, docs/benchmarks.md).
	runtime.Gosched()
	ex.rateHeaders(dec, h.cfg.Headers)
	status := http.StatusOK
	if !dec.Allowed {
		status = http.StatusTooManyRequests
	}
	switch {
	case seed:
		ex.reply(status, "application/json", map[string]bool{"allowed": dec.Allowed})
	case dec.Allowed:
		var body [512]byte
		ex.write(status, "application/json", appendCheckJSON(body[:0], dec, heldLease(dec, lease)))
	default:
		ex.reply(status, "application/problem+json", rejectedProblem(dec))
	}
}

// begin authenticates the request and decodes its body into v, the body
// of a what ("check", "reset"); on failure it has answered and returns
// false.
func (h *httpAPI) begin(ex exchange, what string, v any) (*decide.Config, bool) {
	c, err := h.cfg.Authorize(ex.authorization(), ex.peer())
	if err != nil {
		h.fail(ex, err)
		return nil, false
	}
	// A compressed body would be read as malformed JSON: say why instead
	// (bodies are a few hundred bytes; nothing is gained by compressing).
	if ce := ex.header("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		replyProblem(ex, http.StatusUnsupportedMediaType, "Unsupported Media Type",
			fmt.Sprintf("the body of a %s is read as it is: Content-Encoding %q is not supported", what, ce), nil)
		return nil, false
	}
	err = ex.decode(v, h.cfg.MaxBodyBytes)
	if err == nil {
		return c, true
	}
	if errors.Is(err, errTooLarge) {
		h.tooLarge(ex)
		return nil, false
	}
	replyProblem(ex, http.StatusBadRequest, "Malformed request", "the body is not a valid "+what+": "+err.Error(), nil)
	return nil, false
}

func (h *httpAPI) tooLarge(ex exchange) {
	replyProblem(ex, http.StatusRequestEntityTooLarge, "Request too large",
		fmt.Sprintf("the body exceeds %d bytes", h.cfg.MaxBodyBytes), nil)
}

// decodeOptions: field names match as encoding/json matches them (case
// aside); unknown ones, duplicates and invalid UTF-8 are errors. Bodies
// are decoded with the module of Go's encoding/json/v2 (experimental in
// the standard library as of Go 1.26): a third of encoding/json's CPU for
// a check body.
var decodeOptions = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true), jsonv2.MatchCaseInsensitiveNames(true))

// stdExchange is an exchange on net/http.
type stdExchange struct {
	w http.ResponseWriter
	r *http.Request
}

func (e *stdExchange) context() context.Context { return e.r.Context() }
func (e *stdExchange) authorization() string    { return e.r.Header.Get("Authorization") }
func (e *stdExchange) header(key string) string { return e.r.Header.Get(key) }
func (e *stdExchange) peer() string             { return e.r.RemoteAddr }

// decode reads one JSON object; unknown fields and trailing data are
// errors.
func (e *stdExchange) decode(v any, maxBytes int64) error {
	body, err := io.ReadAll(http.MaxBytesReader(e.w, e.r.Body, maxBytes))
	if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
		return errTooLarge
	}
	if err != nil {
		return err
	}
	if err := refuseNonObject(body); err != nil {
		return err
	}
	return jsonv2.Unmarshal(body, v, decodeOptions)
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

func (e *stdExchange) rateHeaders(dec decide.Decision, style rlheaders.Style) {
	SetHeaders(e.w.Header(), style, dec)
}

func (e *stdExchange) write(status int, contentType string, body []byte) {
	e.w.Header().Set("Content-Type", contentType)
	e.w.WriteHeader(status)
	_, _ = e.w.Write(body)
}

func (e *stdExchange) reply(status int, contentType string, v any) {
	writeJSON(e.w, status, contentType, v)
}

// fail answers err: policy errors with their status and details, anything
// else as an internal error whose text is logged, never sent.
func (h *httpAPI) fail(ex exchange, err error) {
	if errors.Is(err, context.Canceled) { // the client went away: nothing failed, nobody reads the answer
		h.cfg.Logger.Debug("check canceled by the client")
		replyProblem(ex, statusClientClosed, "Client Closed Request", "the request was canceled", nil)
		return
	}
	var pe *policy.Error
	if !errors.As(err, &pe) {
		h.cfg.Logger.Error("check failed", "err", err)
		replyProblem(ex, http.StatusInternalServerError, "Internal error", "the decision could not be made", nil)
		return
	}
	status := pe.Code.Status().HTTP
	replyCodedProblem(ex, pe.Code, http.StatusText(status), pe.Message, pe.Fields)
}

// statusClientClosed answers a request its client canceled (nginx's 499).
const statusClientClosed = 499

func descriptorsOf(m map[string]string) policy.Descriptors {
	d := make(policy.Descriptors, 0, len(m))
	for k, v := range m {
		d = append(d, policy.Descriptor{Key: k, Value: v})
	}
	slices.SortFunc(d, func(a, b policy.Descriptor) int { return strings.Compare(a.Key, b.Key) })
	return d
}

func rulesJSON(dec decide.Decision) []RuleJSON {
	out := make([]RuleJSON, len(dec.Rules))
	for i, r := range dec.Rules {
		out[i] = ruleJSON(r)
		if ms, ok := retryAfterMS(r); ok {
			out[i].RetryAfterMS = &ms
		}
	}
	return out
}

// ruleJSON is r's answer, but for RetryAfterMS (see retryAfterMS).
func ruleJSON(r decide.RuleResult) RuleJSON {
	return RuleJSON{Rule: r.Rule.Name, Allowed: r.Allowed, Shadow: r.Rule.Shadow, Limit: r.Limit,
		Remaining: r.Remaining, ResetAfterMS: ceilMS(r.ResetAfter), DelayMS: ceilMS(r.Delay), Message: decision.RejectionMessage(r), Unenforced: r.Unenforced}
}

// retryAfterMS is r's retry_after_ms, when it has one: a rejection that a
// later request can pass.
func retryAfterMS(r decide.RuleResult) (int64, bool) {
	return ceilMS(r.RetryAfter), !r.Allowed && r.RetryAfter != limit.Never
}

// problem is an RFC 9457 problem details body.
type problem struct {
	Type             string              `json:"type"`
	Title            string              `json:"title"`
	Status           int                 `json:"status"`
	Detail           string              `json:"detail"`
	Errors           []policy.FieldError `json:"errors,omitempty"`
	ViolatedPolicies []string            `json:"violated_policies,omitempty"`
	Rules            []RuleJSON          `json:"rules,omitempty"`
	ConfigVersion    int64               `json:"config_version,omitempty"`
	Degraded         string              `json:"degraded,omitempty"`
	// code is the policy code behind a policy error's answer; CodeUnknown
	// for the transport's own refusals.
	code policy.Code
}

func rejectedProblem(dec decide.Decision) problem {
	p := problem{Type: "https://sluice.dev/problems/rate-limited", Title: "Too Many Requests",
		Status: http.StatusTooManyRequests, Rules: rulesJSON(dec), ConfigVersion: dec.Version, Degraded: dec.Degradation.Reason()}
	for _, r := range dec.Rules {
		if !r.Allowed && !r.Rule.Shadow {
			p.ViolatedPolicies = append(p.ViolatedPolicies, r.Rule.Name)
		}
	}
	p.Detail = "rejected by " + strings.Join(p.ViolatedPolicies, ", ")
	if dec.Deciding >= 0 {
		p.Detail = cmp.Or(decision.RejectionMessage(dec.Rules[dec.Deciding]), p.Detail) // the tenant's words, where it has some
	}
	return p
}

// replyProblem answers a refusal of the transport's own (a malformed body,
// a method not allowed): status says it, with no policy code behind it.
func replyProblem(ex exchange, status int, title, detail string, fields []policy.FieldError) {
	ex.reply(status, "application/problem+json", problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Errors: fields})
}

// replyCodedProblem answers a policy error of code c, with the status
// policy's table gives it.
func replyCodedProblem(ex exchange, c policy.Code, title, detail string, fields []policy.FieldError) {
	status := c.Status().HTTP
	ex.reply(status, "application/problem+json", problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Errors: fields, code: c})
}

func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
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
}

// appendCheckJSON appends the JSON of CheckJSON{Allowed: true, Rules:
// rulesJSON(dec), ConfigVersion: dec.Version, Lease: lease, Degraded:
// dec.Degradation.Reason()}, as encoding/json writes it
// (but for its escaping of '<', '>', '&', U+2028 and U+2029 in rule names,
// which this leaves as they are), with its final newline: the body of every admitted check,
// without reflection or allocations of its own (FuzzCheckJSON).
func appendCheckJSON(b []byte, dec decide.Decision, lease string) []byte {
	b = append(b, `{"allowed":true,"rules":[`...)
	for i, rr := range dec.Rules {
		if i > 0 {
			b = append(b, ',')
		}
		r := ruleJSON(rr)
		b = append(b, `{"rule":`...)
		b, _ = jsontext.AppendQuote(b, r.Rule) // rule names are valid UTF-8
		b = append(b, `,"allowed":`...)
		b = strconv.AppendBool(b, r.Allowed)
		if r.Shadow {
			b = append(b, `,"shadow":true`...)
		}
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, r.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, r.Remaining, 10)
		b = append(b, `,"reset_after_ms":`...)
		b = strconv.AppendInt(b, r.ResetAfterMS, 10)
		if ms, ok := retryAfterMS(rr); ok {
			b = append(b, `,"retry_after_ms":`...)
			b = strconv.AppendInt(b, ms, 10)
		}
		if r.DelayMS != 0 {
			b = append(b, `,"delay_ms":`...)
			b = strconv.AppendInt(b, r.DelayMS, 10)
		}
		if r.Unenforced {
			b = append(b, `,"unenforced":true`...)
		}
		b = append(b, '}')
	}
	b = append(b, `],"config_version":`...)
	b = strconv.AppendInt(b, dec.Version, 10)
	if lease != "" {
		b = append(b, `,"lease":`...)
		b, _ = jsontext.AppendQuote(b, lease)
	}
	if dec.Degraded {
		b = append(b, `,"degraded":"`...)
		b = append(b, dec.Degradation.Reason()...)
		b = append(b, '"')
	}
	return append(b, "}\n"...)
}

func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }
