// Package unkey serves Unkey's rate limit call (POST /v2/ratelimit.limit) on
// the decider's HTTP port, over the decision service, in Unkey's answer
// shape (package unkeywire).
package unkey

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/unkeywire"
)

// Unkey's rate limit API, version 2 (POST /v2/ratelimit.limit), so that
// an application calling Unkey, or its SDK with the base URL changed,
// moves over by changing where it calls and with which key (the tenant's
// check key in place of the root key). A request brings its own limit:
// limit per duration for one identifier in one namespace, counted by a
// sliding window as Unkey counts it, in place of the tenant's rules but
// those that override it (see unkeyNamespace).

// LimitPath is the path of Unkey's rate limit call.
const LimitPath = "/v2/ratelimit.limit"

// The descriptors of an Unkey call. Its own limit gives way to the
// tenant's rules that match it with a condition on the namespace (Unkey's
// overrides): a rule matching namespace=api and identifier=user_42, or
// identifier=user_* (a counter each, keyed by identifier), sets their
// limit centrally, whatever the calls say.
const (
	unkeyNamespace  = "namespace"
	unkeyIdentifier = "identifier"
)

// unkeyBody is the request of POST /v2/ratelimit.limit.
type unkeyBody struct {
	Namespace  string `json:"namespace"`
	Identifier string `json:"identifier"`
	Limit      int64  `json:"limit"`
	// Duration is the window in milliseconds: whole seconds here.
	Duration int64 `json:"duration"`
	// Cost is what the request takes (absent: 1); 0 asks without taking.
	Cost *int64 `json:"cost"`
	// Async is accepted and ignored: every answer here is exact.
	Async bool `json:"async"`
}

// request is the decision b asks for, or the field errors of its body.
func (b *unkeyBody) request() (decide.Request, error) {
	var fields []policy.FieldError
	bad := func(field, desc string) { fields = append(fields, policy.FieldError{Field: field, Description: desc}) }
	decision.CheckNames(bad, unkeywire.MaxName, decision.NameField{Field: "namespace", Value: b.Namespace}, decision.NameField{Field: "identifier", Value: b.Identifier})
	unkeywire.CheckLimit(bad, b.Limit, b.Duration)
	cost := int64(1)
	if b.Cost != nil {
		cost = *b.Cost
	}
	if cost < 0 || cost > policy.MaxLimit {
		bad("cost", "must be 0 to 1e9")
	}
	if fields != nil {
		return decide.Request{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid ratelimit.limit request", Fields: fields}
	}
	req := decide.Request{Cost: cost, Peek: cost == 0,
		Descriptors: policy.Descriptors{{Key: unkeyIdentifier, Value: b.Identifier}, {Key: unkeyNamespace, Value: b.Namespace}},
		Limit: &decide.RequestLimit{Requests: b.Limit, Window: time.Duration(b.Duration) * time.Millisecond, Algorithm: policy.SlidingWindow,
			OverriddenBy: unkeyNamespace}}
	return req, nil
}

// Routes are the decider's route of Unkey's API: POST /v2/ratelimit.limit.
func Routes(a *httpport.API) []httpport.Route {
	return []httpport.Route{{Method: http.MethodPost, Path: LimitPath, Serve: func(ex httpport.Exchange) { limit(a, ex) },
		Envelope: func(ex httpport.Exchange) httpport.Exchange { return unkeyExchange{ex} }}}
}

// limit answers POST /v2/ratelimit.limit as Unkey does: 200 whether
// or not the limit admits the request (data.success says), errors in
// Unkey's envelope.
func limit(h *httpport.API, ex httpport.Exchange) {
	ex = unkeyExchange{ex}
	var body unkeyBody
	c, ok := h.Begin(ex, "ratelimit.limit request", &body)
	if !ok {
		return
	}
	req, err := body.request()
	if err != nil {
		h.Fail(ex, err)
		return
	}
	dec, err := h.Decide(h.Traced(ex), c, req)
	if err != nil {
		h.Fail(ex, err)
		return
	}
	data := unkeyData{Success: dec.Allowed || req.Peek} // a cost of 0 takes nothing: never over
	if len(dec.Rules) > 0 {
		r := dec.Rules[max(dec.Deciding, 0)]
		data.Limit, data.Remaining = r.Limit, max(r.Remaining, 0)
		data.Reset = h.Now().Add(r.ResetAfter).UnixMilli()
		if !decide.IsRequestLimit(r.Rule) { // a tenant's rule: Unkey's override, by the id the override API gives it
			data.OverrideID = r.Rule.ID
		}
	}
	ex.Reply(http.StatusOK, "application/json", unkeywire.Answer[unkeyData]{Meta: unkeywire.Meta{RequestID: unkeywire.RequestID()}, Data: &data})
}

// unkeyData is a decision: success (admitted), the limit, what remains of
// it, when the window resets (Unix milliseconds), and the override that
// decided, if any.
type unkeyData struct {
	Success   bool  `json:"success"`
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset"`
	// OverrideID names the override that decided, when one did: the
	// tenant's rule (controlplane's Unkey override API gives its id).
	OverrideID string `json:"overrideId,omitempty"`
}

// unkeyExchange answers problems in Unkey's error envelope; all else
// passes through.
type unkeyExchange struct{ httpport.Exchange }

func (e unkeyExchange) Reply(status int, contentType string, v any) {
	p, ok := v.(httpport.Problem)
	if !ok {
		e.Exchange.Reply(status, contentType, v)
		return
	}
	e.Exchange.Reply(status, "application/json", unkeywire.Answer[unkeyData]{Meta: unkeywire.Meta{RequestID: unkeywire.RequestID()},
		Error: unkeywire.ErrorOf(p.Status, p.Title, p.Detail, p.Type, p.Errors)})
}
