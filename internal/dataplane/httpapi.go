// Package dataplane serves decisions: the HTTP check APIs, and the
// authentication of check keys.
package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/rlheaders"
)

// DefaultMaxBodyBytes bounds a check request's body.
const DefaultMaxBodyBytes = 64 << 10

// AuthenticateFunc returns the config of the tenant whose check key the
// request's Authorization header (gRPC: authorization metadata) carries,
// or a policy error with CodeUnauthenticated.
type AuthenticateFunc func(authorization string) (*decide.Config, error)

// HTTPConfig configures the HTTP check API.
type HTTPConfig struct {
	Decider      *decide.Decider
	Authenticate AuthenticateFunc
	MaxBodyBytes int64        // 0 means DefaultMaxBodyBytes
	Logger       *slog.Logger // nil means slog.Default()
	Metrics      *Metrics     // nil records nothing
	// Events receives rejections and counts; nil publishes nothing.
	Events *events.Publisher
}

// decide runs one decision and records it.
func (cfg *HTTPConfig) decide(ctx context.Context, c *decide.Config, req decide.Request) (decide.Decision, error) {
	start := time.Now()
	dec, err := cfg.Decider.Decide(ctx, c, req)
	cfg.Metrics.observe(c.Tenant.Slug, dec, err, time.Since(start))
	if cfg.Events != nil && err == nil {
		cost := max(req.Cost, 1)
		for _, r := range dec.Rules {
			cfg.Events.Count(c.Tenant.ID, dec.Tier, r.Rule.ID, r.Allowed, r.Rule.Shadow)
			if !r.Allowed {
				cfg.Events.Rejected(c.Tenant.ID, dec.Tier, r.Rule.ID, policy.ClientKey(r.Rule, req.Descriptors), cost, start, r.Rule.Shadow)
			}
		}
	}
	return dec, err
}

// NewHTTPHandler returns the handler of POST /v1/check and the
// seed-compatible POST /shouldAllowRequest.
func NewHTTPHandler(cfg HTTPConfig) http.Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &httpAPI{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", h.check)
	mux.HandleFunc("POST /shouldAllowRequest", h.shouldAllow)
	return mux
}

type httpAPI struct{ cfg HTTPConfig }

// checkBody is the JSON of POST /v1/check.
type checkBody struct {
	Tier        string            `json:"tier"`
	Descriptors map[string]string `json:"descriptors"`
	Cost        int64             `json:"cost"`
	// Lease names a concurrency lease: taken by a check, ended by a check
	// with release set.
	Lease   string `json:"lease"`
	Release bool   `json:"release"`
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
}

// CheckJSON is the body of a check response when the request is allowed.
type CheckJSON struct {
	Allowed       bool       `json:"allowed"`
	Rules         []RuleJSON `json:"rules"`
	ConfigVersion int64      `json:"config_version"`
}

func (h *httpAPI) check(w http.ResponseWriter, r *http.Request) {
	var body checkBody
	c, ok := h.begin(w, r, &body)
	if !ok {
		return
	}
	req := decide.Request{Tier: body.Tier, Cost: body.Cost, Descriptors: descriptorsOf(body.Descriptors), Lease: LeaseID(body.Lease)}
	if body.Release {
		if body.Lease == "" {
			h.fail(w, &policy.Error{Code: policy.CodeInvalid, Message: "invalid release",
				Fields: []policy.FieldError{{Field: "lease", Description: "required to release a lease"}}})
			return
		}
		if err := h.cfg.Decider.Release(r.Context(), c, req); err != nil {
			h.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, "application/json", map[string]bool{"released": true})
		return
	}
	h.decide(w, r.Context(), c, req, false)
}

// shouldAllowBody is the seed API's request. The timestamp is accepted for
// compatibility and not trusted: time comes from the decider's store.
type shouldAllowBody struct {
	ClientID  string `json:"clientId"`
	Timestamp any    `json:"timestamp"`
}

func (h *httpAPI) shouldAllow(w http.ResponseWriter, r *http.Request) {
	var body shouldAllowBody
	c, ok := h.begin(w, r, &body)
	if !ok {
		return
	}
	if body.ClientID == "" {
		h.fail(w, &policy.Error{Code: policy.CodeInvalid, Message: "invalid check",
			Fields: []policy.FieldError{{Field: "clientId", Description: "required"}}})
		return
	}
	req := decide.Request{Descriptors: policy.Descriptors{{Key: policy.DefaultIdentifierKey, Value: body.ClientID}}}
	h.decide(w, r.Context(), c, req, true)
}

func (h *httpAPI) decide(w http.ResponseWriter, ctx context.Context, c *decide.Config, req decide.Request, seed bool) {
	dec, err := h.cfg.decide(ctx, c, req)
	if err != nil {
		h.fail(w, err)
		return
	}
	// Yield once before answering. A decision made on the decider (local
	// counting, the deny cache) never blocks, and net/http's connection
	// goroutines that never block keep their thread until preempted: wrk's
	// p99 on POST /v1/check doubled without this (22 against 10–12 ms on a
	// slower machine; 11.6–11.9 against 6.5–7 ms here). It lives here, not
	// in the engine, because gRPC's handlers hand their answer to another
	// goroutine anyway: there the yield only cost 1.7 µs per decision
	// (interleaved runs, docs/benchmarks.md).
	runtime.Gosched()
	SetHeaders(w.Header(), dec)
	status := http.StatusOK
	if !dec.Allowed {
		status = http.StatusTooManyRequests
	}
	switch {
	case seed:
		writeJSON(w, status, "application/json", map[string]bool{"allowed": dec.Allowed})
	case dec.Allowed:
		writeJSON(w, status, "application/json", CheckJSON{Allowed: true, Rules: rulesJSON(dec), ConfigVersion: dec.Version})
	default:
		writeJSON(w, status, "application/problem+json", rejectedProblem(dec))
	}
}

// begin authenticates r and decodes its body into v; on failure it has
// answered and returns false.
func (h *httpAPI) begin(w http.ResponseWriter, r *http.Request, v any) (*decide.Config, bool) {
	c, err := h.cfg.Authenticate(r.Header.Get("Authorization"))
	if err != nil {
		h.fail(w, err)
		return nil, false
	}
	return c, h.decodeJSON(w, r, v)
}

// decodeOptions: field names match as encoding/json matches them (case
// aside); unknown ones, duplicates and invalid UTF-8 are errors.
var decodeOptions = jsonv2.JoinOptions(jsonv2.RejectUnknownMembers(true), jsonv2.MatchCaseInsensitiveNames(true))

// decodeJSON reads one JSON object of at most MaxBodyBytes; unknown fields
// and trailing data are errors. It decodes with the module of Go's
// encoding/json/v2 (experimental in the standard library as of Go 1.26):
// a third of encoding/json's CPU for a check body.
func (h *httpAPI) decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	err := jsonv2.UnmarshalRead(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes), v, decodeOptions)
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeProblem(w, http.StatusRequestEntityTooLarge, "Request too large",
			fmt.Sprintf("the body exceeds %d bytes", h.cfg.MaxBodyBytes), nil)
		return false
	}
	writeProblem(w, http.StatusBadRequest, "Malformed request", "the body is not a valid check: "+err.Error(), nil)
	return false
}

// fail answers err: policy errors with their status and details, anything
// else as an internal error whose text is logged, never sent.
func (h *httpAPI) fail(w http.ResponseWriter, err error) {
	if errors.Is(err, context.Canceled) { // the client went away: nothing failed, nobody reads the answer
		h.cfg.Logger.Debug("check canceled by the client")
		writeProblem(w, statusClientClosed, "Client Closed Request", "the request was canceled", nil)
		return
	}
	var pe *policy.Error
	if !errors.As(err, &pe) {
		h.cfg.Logger.Error("check failed", "err", err)
		writeProblem(w, http.StatusInternalServerError, "Internal error", "the decision could not be made", nil)
		return
	}
	status := HTTPStatus(pe.Code)
	writeProblem(w, status, http.StatusText(status), pe.Message, pe.Fields)
}

// statusClientClosed answers a request its client canceled (nginx's 499).
const statusClientClosed = 499

// HTTPStatus maps a policy error code to an HTTP status, in one place.
func HTTPStatus(c policy.Code) int {
	switch c {
	case policy.CodeInvalid:
		return http.StatusBadRequest
	case policy.CodeNotFound:
		return http.StatusNotFound
	case policy.CodeConflict:
		return http.StatusConflict
	case policy.CodeUnauthenticated:
		return http.StatusUnauthorized
	case policy.CodePermissionDenied:
		return http.StatusForbidden
	case policy.CodeUnavailable:
		return http.StatusServiceUnavailable
	case policy.CodeResourceExhausted:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

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
		out[i] = RuleJSON{Rule: r.Rule.Name, Allowed: r.Allowed, Shadow: r.Rule.Shadow, Limit: r.Limit,
			Remaining: r.Remaining, ResetAfterMS: ceilMS(r.ResetAfter), DelayMS: ceilMS(r.Delay)}
		if !r.Allowed && r.RetryAfter != limit.Never {
			ms := ceilMS(r.RetryAfter)
			out[i].RetryAfterMS = &ms
		}
	}
	return out
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
}

func rejectedProblem(dec decide.Decision) problem {
	p := problem{Type: "https://sluice.dev/problems/rate-limited", Title: "Too Many Requests",
		Status: http.StatusTooManyRequests, Rules: rulesJSON(dec), ConfigVersion: dec.Version}
	for _, r := range dec.Rules {
		if !r.Allowed && !r.Rule.Shadow {
			p.ViolatedPolicies = append(p.ViolatedPolicies, r.Rule.Name)
		}
	}
	p.Detail = "rejected by " + strings.Join(p.ViolatedPolicies, ", ")
	return p
}

func writeProblem(w http.ResponseWriter, status int, title, detail string, fields []policy.FieldError) {
	writeJSON(w, status, "application/problem+json", problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Errors: fields})
}

func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// SetHeaders sets the rate limit headers of dec (see rlheaders): those of
// the deciding rule, the one that denied, not one that passed.
func SetHeaders(h http.Header, dec decide.Decision) {
	rlheaders.Set(h, headerRules(dec), dec.Deciding, dec.Allowed)
}

// headerRules are dec's rules as package rlheaders needs them.
func headerRules(dec decide.Decision) []rlheaders.Rule {
	rules := make([]rlheaders.Rule, len(dec.Rules))
	for i, r := range dec.Rules {
		retry := r.RetryAfter
		if retry == limit.Never {
			retry = -1
		}
		rules[i] = rlheaders.Rule{Name: r.Rule.Name, Limit: r.Limit, Remaining: r.Remaining, Window: r.Rule.Window,
			ResetAfter: r.ResetAfter, RetryAfter: retry}
	}
	return rules
}

func ceilMS(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }
