// Package checkapi is Sluice's own check API over the decision service
// (internal/decision): POST /v1/check, POST /v1/reset and the
// seed-compatible POST /shouldAllowRequest as HTTP routes
// (internal/httpport), and sluice.v1.DecisionService over Connect and
// gRPC. One API in three encodings: the same requests, leases and errors.
package checkapi

import (
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/sluicehq/sluice/internal/days"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/policy"
)

// Routes are the check API's: POST /v1/check, POST /v1/reset and the
// seed-compatible POST /shouldAllowRequest.
func Routes(a *httpport.API) []httpport.Route {
	h := &httpAPI{a}
	return []httpport.Route{
		{Method: http.MethodPost, Path: "/v1/check", Serve: h.check, Browsers: true},
		{Method: http.MethodPost, Path: "/v1/reset", Serve: h.reset, Browsers: true},
		{Method: http.MethodPost, Path: "/shouldAllowRequest", Serve: h.shouldAllow},
	}
}

// httpAPI answers the check routes over an httpport.Exchange, whichever HTTP server
// carries it.
type httpAPI struct{ *httpport.API }

// checkBody is the JSON of POST /v1/check.
type checkBody struct {
	Tier        string            `json:"tier"`
	Descriptors map[string]string `json:"descriptors"`
	Cost        int64             `json:"cost"`
	// Lease names a concurrency lease: taken by a check, ended by a check
	// with release set.
	Lease   string `json:"lease"`
	Release bool   `json:"release"`
	// LatencyMS and Outcome, with release, are how the request went
	// (decide.Request.Latency and Outcome).
	LatencyMS float64 `json:"latency_ms"`
	Outcome   string  `json:"outcome"`
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

// CheckJSON is the body of a check response when the request is allowed.
type CheckJSON struct {
	Allowed       bool                `json:"allowed"`
	Rules         []httpport.RuleJSON `json:"rules"`
	ConfigVersion int64               `json:"config_version"`
	// Lease names the lease the request holds on the concurrency rules it
	// met: the request's, or the decider's new one, to end with a release.
	Lease string `json:"lease,omitempty"`
	// Degraded names why the shared store did not decide
	// (decide.Degradation.Reason): store_unavailable or overload.
	Degraded string `json:"degraded,omitempty"`
}

func (h *httpAPI) check(ex httpport.Exchange) {
	var body checkBody
	c, ok := h.Begin(ex, "check", &body)
	if !ok {
		return
	}
	req := decide.Request{Tier: body.Tier, Cost: body.Cost, Descriptors: body.descriptors(), Lease: decision.LeaseID(body.Lease), Peek: body.Peek}
	var err error
	if req.Limit, err = body.Limit.requestLimit(); err != nil {
		h.Fail(ex, err)
		return
	}
	if req.Latency, req.Outcome, err = releaseSample(body.Release, time.Duration(body.LatencyMS*float64(time.Millisecond)), body.Outcome, "latency_ms"); err != nil {
		h.Fail(ex, err)
		return
	}
	if body.Release {
		if body.Lease == "" {
			h.Fail(ex, errReleaseWithoutLease)
			return
		}
		if err := h.Release(ex.Context(), c, req); err != nil {
			h.Fail(ex, err)
			return
		}
		ex.Reply(http.StatusOK, "application/json", map[string]bool{"released": true})
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

func (h *httpAPI) reset(ex httpport.Exchange) {
	var body resetBody
	c, ok := h.Begin(ex, "reset", &body)
	if !ok {
		return
	}
	rules, err := h.Reset(ex.Context(), c, decide.Request{Tier: body.Tier, Descriptors: descriptorsOf(body.Descriptors)})
	if err != nil {
		h.Fail(ex, err)
		return
	}
	out := ResetJSON{Reset: make([]string, len(rules))}
	for i, r := range rules {
		out.Reset[i] = r.Name
	}
	ex.Reply(http.StatusOK, "application/json", out)
}

// shouldAllowBody is the seed API's request. The timestamp is accepted for
// compatibility and not trusted: time comes from the decider's store.
type shouldAllowBody struct {
	ClientID  string `json:"clientId"`
	Timestamp any    `json:"timestamp"`
}

func (h *httpAPI) shouldAllow(ex httpport.Exchange) {
	var body shouldAllowBody
	c, ok := h.Begin(ex, "shouldAllowRequest", &body)
	if !ok {
		return
	}
	if body.ClientID == "" {
		h.Fail(ex, &policy.Error{Code: policy.CodeInvalid, Message: "invalid check",
			Fields: []policy.FieldError{{Field: "clientId", Description: "required"}}})
		return
	}
	req := decide.Request{Descriptors: policy.Descriptors{{Key: policy.DefaultIdentifierKey, Value: body.ClientID}}}
	h.decide(ex, c, req, "", true)
}

// decide answers req; lease is the name of the lease it asks for.
func (h *httpAPI) decide(ex httpport.Exchange, c *decide.Compiled, req decide.Request, lease string, seed bool) {
	dec, err := h.Decide(h.Traced(ex), c, req)
	if err != nil {
		h.Fail(ex, err)
		return
	}
	// Yield once before answering. A decision made on the decider (local
	// counting, the deny cache) never blocks, and connection goroutines
	// that never block keep their thread until preempted: wrk's p99 on
	// POST /v1/check nearly doubled without this. It lives here, not in
	// the engine, because gRPC's handlers hand their answer to another
	// goroutine anyway: there the yield only cost time (docs/benchmarks.md
	// has the figures).
	runtime.Gosched()
	ex.RateHeaders(dec, h.Headers)
	status := http.StatusOK
	if !dec.Allowed {
		status = http.StatusTooManyRequests
	}
	switch {
	case seed:
		ex.Reply(status, "application/json", map[string]bool{"allowed": dec.Allowed})
	case dec.Allowed:
		var body [512]byte
		ex.Write(status, "application/json", appendCheckJSON(body[:0], dec, decision.HeldLease(dec, lease)))
	default:
		ex.Reply(status, "application/problem+json", httpport.RejectedProblem(dec))
	}
}

// descriptorsOf is the descriptors of a check's JSON object, in no set
// order (a rule reads them by key).
func descriptorsOf(m map[string]string) policy.Descriptors {
	d := make(policy.Descriptors, 0, len(m))
	for k, v := range m {
		d = append(d, policy.Descriptor{Key: k, Value: v})
	}
	slices.SortFunc(d, func(a, b policy.Descriptor) int { return strings.Compare(a.Key, b.Key) })
	return d
}

// appendCheckJSON appends the JSON of CheckJSON{Allowed: true, Rules:
// httpport.RulesJSON(dec), ConfigVersion: dec.Version, Lease: lease, Degraded:
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
		r := httpport.RuleJSONOf(rr)
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
		if ms, ok := httpport.RetryAfterMS(rr); ok {
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
