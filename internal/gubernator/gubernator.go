// Package gubernator serves gubernator's V1 API (pb.gubernator.V1: GetRateLimits and HealthCheck),
// over gRPC on the decider's gRPC port and as its HTTP gateway's JSON
// (POST /v1/GetRateLimits, GET /v1/HealthCheck) on the HTTP port, so that
// an application calling gubernator moves over by changing where it calls
// and adding the tenant's check key (Authorization: Bearer, as metadata
// over gRPC). Each request brings its own limit, as gubernator's do,
// decided apart from the tenant's rules and from the other requests of
// the call: counted per (name, unique_key), a TOKEN_BUCKET by a fixed
// window of the duration (gubernator's token bucket refills whole at the
// end of its duration), a LEAKY_BUCKET by GCRA at limit per duration with
// a burst of the limit.
package gubernator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	gubernatorpb "github.com/sluicehq/sluice/internal/gen/pb/gubernator"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
	"google.golang.org/grpc"
)

// Paths of gubernator's HTTP gateway.
const (
	LimitsPath = "/v1/GetRateLimits"
	HealthPath = "/v1/HealthCheck"
)

// MaxRequests bounds the requests of one GetRateLimits call, as
// gubernator bounds them.
const MaxRequests = 1000

// gubernatorWindows are the DURATION_IS_GREGORIAN durations of the units
// a window aligned on the Unix epoch starts as the calendar does, in UTC:
// minutes, hours and days; gubernatorCalendar those of calendar windows:
// weeks (from Monday, which gubernator refuses), months and years.
var (
	gubernatorWindows  = map[int64]time.Duration{0: time.Minute, 1: time.Hour, 2: 24 * time.Hour}
	gubernatorCalendar = map[int64]policy.Calendar{3: policy.CalendarWeek, 4: policy.CalendarMonth, 5: policy.CalendarYear}
)

// gubernatorBehaviors are the behavior flags accepted: batching, global
// and multi-region change nothing here (every decider counts in Redis, at
// once); the calendar, resets and draining are served.
const gubernatorBehaviors = gubernatorpb.Behavior_NO_BATCHING | gubernatorpb.Behavior_GLOBAL | gubernatorpb.Behavior_DURATION_IS_GREGORIAN |
	gubernatorpb.Behavior_RESET_REMAINING | gubernatorpb.Behavior_MULTI_REGION | gubernatorpb.Behavior_DRAIN_OVER_LIMIT

// gubernatorRequest is the decision r asks for and whether it resets the
// counter first (RESET_REMAINING), or what is wrong with it: gubernator
// answers a request it cannot decide with an error of its own, beside the
// others' answers.
func gubernatorRequest(r *gubernatorpb.RateLimitReq) (decide.Request, bool, error) {
	var fields []policy.FieldError
	bad := func(field, desc string) { fields = append(fields, policy.FieldError{Field: field, Description: desc}) }
	decision.CheckNames(bad, policy.MaxDescriptorVal, decision.NameField{Field: "name", Value: r.GetName()}, decision.NameField{Field: "unique_key", Value: r.GetUniqueKey()})
	if r.GetHits() < 0 || r.GetHits() > policy.MaxLimit {
		bad("hits", "must be 0 to 1e9")
	}
	if r.GetLimit() < 1 || r.GetLimit() > policy.MaxLimit {
		bad("limit", "must be 1 to 1e9")
	}
	b := r.GetBehavior()
	if b&^gubernatorBehaviors != 0 {
		bad("behavior", "unknown flags")
	}
	l := &decide.RequestLimit{Requests: r.GetLimit(), Algorithm: policy.FixedWindow}
	switch r.GetAlgorithm() {
	case gubernatorpb.Algorithm_TOKEN_BUCKET:
	case gubernatorpb.Algorithm_LEAKY_BUCKET:
		l.Algorithm = policy.GCRA
		if r.GetBurst() != 0 && r.GetBurst() != r.GetLimit() {
			bad("burst", "must be 0 or the limit: a leaky bucket's burst is its limit here")
		}
	default:
		bad("algorithm", "must be TOKEN_BUCKET or LEAKY_BUCKET")
	}
	if b&gubernatorpb.Behavior_DURATION_IS_GREGORIAN != 0 {
		l.Window, l.Calendar = gubernatorWindows[r.GetDuration()], gubernatorCalendar[r.GetDuration()]
		switch {
		case l.Window == 0 && l.Calendar == policy.CalendarNone:
			bad("duration", "with DURATION_IS_GREGORIAN, 0 (minutes), 1 (hours), 2 (days), 3 (weeks), 4 (months) or 5 (years)")
		case l.Algorithm != policy.FixedWindow:
			bad("behavior", "DURATION_IS_GREGORIAN is for TOKEN_BUCKET")
		}
	} else {
		d := r.GetDuration()
		switch {
		case d < 1000 || d > int64(policy.MaxWindow/time.Millisecond):
			bad("duration", "must be 1000 ms to 366 days")
		case d%1000 != 0:
			bad("duration", "must be whole seconds: a multiple of 1000 milliseconds")
		}
		l.Window = time.Duration(d) * time.Millisecond
	}
	if fields != nil {
		return decide.Request{}, false, &policy.Error{Code: policy.CodeInvalid, Message: "invalid rate limit request", Fields: fields}
	}
	req := decide.Request{Cost: r.GetHits(), Peek: r.GetHits() == 0, Limit: l,
		Descriptors: policy.Descriptors{{Key: "name", Value: r.GetName()}, {Key: "unique_key", Value: r.GetUniqueKey()}}}
	return req, b&gubernatorpb.Behavior_RESET_REMAINING != 0, nil
}

// resetRemaining resets the counter of req, r's decision, for r's
// RESET_REMAINING, and reports whether r is a token bucket that had been
// counted in: gubernator then removes it and answers it whole, taking
// nothing, where a fresh bucket, and a leaky bucket always, take their
// hits from the full limit.
func resetRemaining(cfg *decision.Service, ctx context.Context, c *decide.Compiled, r *gubernatorpb.RateLimitReq, req decide.Request) (existed bool, err error) {
	if r.GetAlgorithm() == gubernatorpb.Algorithm_TOKEN_BUCKET {
		peek := req
		peek.Cost, peek.Peek = 0, true
		dec, err := cfg.Decide(ctx, c, peek)
		if err != nil {
			return false, err
		}
		existed = len(dec.Rules) > 0 && dec.Rules[0].Remaining < r.GetLimit()
	}
	_, err = cfg.Reset(ctx, c, req)
	return existed && err == nil, err
}

// gubernatorLimits answers a GetRateLimits call of tenant c: each request
// decided on its own, all at once, its problems in its answer's error.
func gubernatorLimits(cfg *decision.Service, ctx context.Context, c *decide.Compiled, in *gubernatorpb.GetRateLimitsReq) (*gubernatorpb.GetRateLimitsResp, error) {
	n := len(in.GetRequests())
	if n > MaxRequests {
		return nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid GetRateLimits request",
			Fields: []policy.FieldError{{Field: "requests", Description: fmt.Sprintf("at most %d", MaxRequests)}}}
	}
	out := &gubernatorpb.GetRateLimitsResp{Responses: make([]*gubernatorpb.RateLimitResp, n)}
	if n == 0 { // nothing asked, nothing answered, as gubernator does
		return out, nil
	}
	reqs, errs := make([]decide.Request, n), make([]error, n)
	var ask []decide.Request // the requests to decide, at once
	var at []int
	var removed []bool // requests whose token bucket RESET_REMAINING removed
	for i, r := range in.Requests {
		req, reset, err := gubernatorRequest(r)
		if err == nil && reset {
			var existed bool
			if existed, err = resetRemaining(cfg, ctx, c, r, req); existed {
				// gubernator removes an existing token bucket and answers it
				// whole, taking nothing: asked, not counted.
				req.Cost, req.Peek = 0, true
				if removed == nil {
					removed = make([]bool, n)
				}
				removed[i] = true
			}
		}
		if reqs[i], errs[i] = req, err; err == nil {
			ask, at = append(ask, req), append(at, i)
		}
	}
	decs := make([]decide.Decision, n)
	got, gotErrs := cfg.DecideAll(ctx, c, ask)
	for k, i := range at {
		decs[i], errs[i] = got[k], gotErrs[k]
	}
	drain(cfg, ctx, c, in.Requests, reqs, decs, errs)
	for i, r := range in.Requests {
		res := &gubernatorpb.RateLimitResp{}
		out.Responses[i] = res
		req, dec := reqs[i], decs[i]
		if errs[i] != nil {
			res.Error = gubernatorError(ctx, cfg, errs[i]) // nothing else, as gubernator answers
			continue
		}
		res.Limit = r.GetLimit()
		if len(dec.Rules) > 0 {
			rr := dec.Rules[0]
			res.Remaining = max(rr.Remaining, 0)
			now := cfg.Now()
			res.ResetTime = now.Add(rr.ResetAfter).UnixMilli()
			if rr.ResetAfter <= 0 && req.Limit.Algorithm == policy.FixedWindow {
				// A window nothing has counted in yet is whole already; gubernator
				// names the end of the window all the same.
				res.ResetTime = now.Truncate(req.Limit.Window).Add(req.Limit.Window).UnixMilli()
				if req.Limit.Calendar != policy.CalendarNone {
					_, end := limit.CalendarWindow(now.UnixMicro(), req.Limit.Calendar, time.UTC)
					res.ResetTime = time.UnixMicro(end).UnixMilli()
				}
			}
		}
		// A request of no hits asks whether the next would be over.
		if !dec.Allowed || req.Peek && res.Remaining == 0 {
			res.Status = gubernatorpb.Status_OVER_LIMIT
		}
		if removed != nil && removed[i] {
			res.ResetTime = 0 // as gubernator answers a bucket it removed
		}
	}
	return out, nil
}

// drain takes what remains of each request's limit that its decision
// found it over, when the request asks to (gubernator's DRAIN_OVER_LIMIT):
// a second decision, of that cost, not counted as a request of its own.
// Another request may take some of it first, in which case this one takes
// none; either way its decision says nothing remains.
func drain(cfg *decision.Service, ctx context.Context, c *decide.Compiled, in []*gubernatorpb.RateLimitReq, reqs []decide.Request, decs []decide.Decision, errs []error) {
	var drains []decide.Request
	var at []int
	for i, r := range in {
		dec := &decs[i]
		if errs[i] != nil || dec.Allowed || r.GetBehavior()&gubernatorpb.Behavior_DRAIN_OVER_LIMIT == 0 || len(dec.Rules) == 0 || dec.Rules[0].Remaining <= 0 {
			continue
		}
		req := reqs[i]
		req.Cost, req.Peek = dec.Rules[0].Remaining, false
		drains, at = append(drains, req), append(at, i)
		dec.Rules[0].Remaining = 0
	}
	if len(drains) == 0 {
		return
	}
	drainErrs := cfg.Drain(ctx, c, drains)
	for k, err := range drainErrs {
		if err != nil {
			cfg.Logger.Warn("gubernator: draining", "tenant", c.Tenant.Slug, "request", at[k], "err", err)
		}
	}
}

// gubernatorError is err as a request's answer tells it: the fields of an
// invalid request, a policy error's message, and nothing of an internal
// error but that it happened (it is logged).
func gubernatorError(ctx context.Context, cfg *decision.Service, err error) string {
	var pe *policy.Error
	if !errors.As(err, &pe) {
		var ce *connect.Error
		if errors.As(protoconv.ToConnectError(ctx, cfg.Logger, err), &ce) { // logged there
			return ce.Message()
		}
		return "the decision could not be made"
	}
	if len(pe.Fields) == 0 {
		return pe.Message
	}
	parts := make([]string, len(pe.Fields))
	for i, f := range pe.Fields {
		parts[i] = f.Field + ": " + f.Description
	}
	return pe.Message + ": " + strings.Join(parts, "; ")
}

// V1 serves gubernator's V1 API over gRPC.
type V1 struct {
	gubernatorpb.UnimplementedV1Server
	cfg decision.Service
}

// Register serves gubernator's V1 API of svc's decider on s.
func Register(s grpc.ServiceRegistrar, svc decision.Service) {
	gubernatorpb.RegisterV1Server(s, &V1{cfg: svc})
}

// GetRateLimits authenticates the call by its check key and decides each
// of its requests.
func (g *V1) GetRateLimits(ctx context.Context, in *gubernatorpb.GetRateLimitsReq) (*gubernatorpb.GetRateLimitsResp, error) {
	ctx = g.cfg.TracedMetadata(ctx)
	c, err := g.cfg.Authorize(decision.Metadata(ctx)("authorization"), decision.PeerOf(ctx))
	if err == nil {
		var out *gubernatorpb.GetRateLimitsResp
		if out, err = gubernatorLimits(&g.cfg, ctx, c, in); err == nil {
			return out, nil
		}
	}
	return nil, protoconv.GRPCStatus(protoconv.ToConnectError(ctx, g.cfg.Logger, err))
}

// HealthCheck answers that the decider is up, as /healthz does (with no
// key: load balancers and gubernator's clients ask it before anything).
func (g *V1) HealthCheck(context.Context, *gubernatorpb.HealthCheckReq) (*gubernatorpb.HealthCheckResp, error) {
	return gubernatorHealthy, nil
}

var gubernatorHealthy = &gubernatorpb.HealthCheckResp{Status: "healthy"}

// gubernatorJSON reads and writes gubernator's messages as its HTTP
// gateway does: fields by either of their JSON names, unknown ones
// ignored; written by their proto names, every field, 64-bit integers as
// strings.
type gubernatorJSON struct{ m proto.Message }

func (j *gubernatorJSON) UnmarshalJSON(b []byte) error {
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, j.m)
}

func (j gubernatorJSON) MarshalJSON() ([]byte, error) {
	return protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(j.m)
}

// Routes are gubernator's HTTP gateway's: POST /v1/GetRateLimits and GET
// /v1/HealthCheck.
func Routes(a *httpport.API) []httpport.Route {
	envelope := func(ex httpport.Exchange) httpport.Exchange { return gatewayExchange{ex} }
	return []httpport.Route{
		{Method: http.MethodPost, Path: LimitsPath, Envelope: envelope, Serve: func(ex httpport.Exchange) { limits(a, ex) }},
		{Method: http.MethodGet, Path: HealthPath, Envelope: envelope, Serve: func(ex httpport.Exchange) {
			ex.Reply(http.StatusOK, "application/json", gubernatorJSON{gubernatorHealthy})
		}},
	}
}

// limits answers POST /v1/GetRateLimits.
func limits(h *httpport.API, ex httpport.Exchange) {
	ex = gatewayExchange{ex}
	var in gubernatorpb.GetRateLimitsReq
	c, ok := h.Begin(ex, "GetRateLimits request", &gubernatorJSON{&in})
	if !ok {
		return
	}
	out, err := gubernatorLimits(&h.Service, h.Traced(ex), c, &in)
	if err != nil {
		h.Fail(ex, err)
		return
	}
	ex.Reply(http.StatusOK, "application/json", gubernatorJSON{out})
}

// gatewayExchange answers problems as gubernator's gateway (grpc-gateway)
// does: {"code": the gRPC code, "message": …, "details": []}, with the
// same HTTP status; all else passes through.
type gatewayExchange struct{ httpport.Exchange }

// gatewayError is grpc-gateway's error body.
type gatewayError struct {
	Code    uint32 `json:"code"`
	Message string `json:"message"`
	Details []any  `json:"details"`
}

func (e gatewayExchange) Reply(status int, contentType string, v any) {
	p, ok := v.(httpport.Problem)
	if !ok {
		e.Exchange.Reply(status, contentType, v)
		return
	}
	msg := p.Detail
	for _, f := range p.Errors {
		msg += "; " + f.Field + ": " + f.Description
	}
	e.Exchange.Reply(status, "application/json", gatewayError{Code: rpcCodeOf(p), Message: msg, Details: []any{}})
}

// rpcCodeOf is the gRPC code grpc-gateway answers p with: its policy
// code's, from policy's one table. The transport's own refusals have none:
// a body refused (400, 413, 415) is InvalidArgument, a request its client
// canceled Canceled, anything else Internal.
func rpcCodeOf(p httpport.Problem) uint32 {
	switch {
	case p.Code != policy.CodeUnknown:
		return p.Code.Status().RPC
	case p.Status == httpport.StatusClientClosed:
		return 1 // Canceled
	case p.Status == http.StatusBadRequest || p.Status == http.StatusRequestEntityTooLarge || p.Status == http.StatusUnsupportedMediaType:
		return policy.CodeInvalid.Status().RPC
	}
	return policy.CodeUnknown.Status().RPC
}
