// Package envoyrls serves Envoy's rate limit service
// (envoy.service.ratelimit.v3) over the decision service: Register puts it
// on a decider's gRPC server.
package envoyrls

import (
	"context"
	"fmt"
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
	"github.com/sluicehq/sluice/internal/rlheaders"
)

// MaxDescriptors bounds the descriptors of one Envoy request.
const MaxDescriptors = 64

// RLS serves Envoy's rate limit service (envoy.service.ratelimit.v3) on the
// decider. The request's domain is the tenant's slug, and Envoy must send
// the tenant's check key as "authorization: Bearer <key>" gRPC metadata
// (initial_metadata of the rate limit service's grpc_service); the domain
// must be the key's tenant. Each descriptor is one decision, its entries
// the request's descriptors, hits_addend (the descriptor's, else the
// request's, where 0 means 1) its cost. A descriptor's own hits_addend of 0
// asks without consuming, as in envoyproxy/ratelimit (decide.Request.Peek):
// OVER_LIMIT when no hit is left. A descriptor's limit (Envoy's
// RateLimitOverride) decides it alone, as envoyproxy/ratelimit does: a
// fixed window of requests_per_unit per unit (times unit_multiplier),
// counted per the values of all its entries (decide.Request.Limit).
type RLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cfg decision.Service
}

// NewRLS returns the rate limit service of cfg's decider.
func NewRLS(cfg decision.Service) *RLS { return &RLS{cfg: cfg} }

// Register serves the rate limit service of cfg's decider on s.
func Register(s grpc.ServiceRegistrar, cfg decision.Service) {
	rlsv3.RegisterRateLimitServiceServer(s, NewRLS(cfg))
}

// ShouldRateLimit answers one Envoy request: a status per descriptor, the
// overall code (OVER_LIMIT when any descriptor is, but for quotas: see
// policy.Rule.Quota and decision.Service.QuotaMode), and the rate limit
// headers of the deciding rule of the first rejected descriptor (else of
// the last one with a rule) for Envoy to add to the response.
func (s *RLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx = s.cfg.TracedMetadata(ctx)
	c, err := s.cfg.Authorize(decision.Metadata(ctx)("authorization"), decision.PeerOf(ctx))
	if err != nil {
		return nil, protoconv.GRPCStatus(protoconv.ToConnectError(ctx, s.cfg.Logger, err))
	}
	switch {
	case req.GetDomain() != c.Tenant.Slug:
		return nil, protoconv.GRPCError(policy.CodePermissionDenied, fmt.Sprintf("domain %q is not this key's tenant", req.GetDomain()))
	case len(req.GetDescriptors()) == 0:
		return nil, protoconv.GRPCError(policy.CodeInvalid, "descriptors: at least one")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return nil, protoconv.GRPCError(policy.CodeInvalid, fmt.Sprintf("descriptors: at most %d", MaxDescriptors))
	}
	if s.cfg.Door(c) != nil {
		return crowded(len(req.Descriptors)), nil
	}
	a := newAnswer(req)
	out, reqs := &a.out, a.reqs
	var limitErrs []error // of descriptors' limits, when any is invalid
	for i, d := range req.Descriptors {
		if d.GetLimit() != nil {
			l, err := requestLimit(d.GetLimit())
			if err != nil {
				if limitErrs == nil {
					limitErrs = make([]error, len(reqs))
				}
				limitErrs[i] = err
			}
			reqs[i].Limit = l
		}
		cost := int64(req.GetHitsAddend())
		if d.GetHitsAddend() != nil {
			cost = int64(min(d.GetHitsAddend().GetValue(), math.MaxInt32))
		}
		reqs[i].Cost, reqs[i].Peek = cost, d.GetHitsAddend() != nil && cost == 0
		for _, e := range d.GetEntries() {
			a.descs = append(a.descs, policy.Descriptor{Key: e.GetKey(), Value: e.GetValue()})
		}
		reqs[i].Descriptors = a.descs[len(a.descs)-len(d.GetEntries()) : len(a.descs) : len(a.descs)]
	}
	var decs []decide.Decision
	err = decision.RefuseAny("descriptors", len(reqs), func(i int) error {
		if limitErrs != nil && limitErrs[i] != nil {
			return limitErrs[i]
		}
		return s.cfg.Validate(c, reqs[i])
	})
	if err == nil {
		s.cfg.ReplacedBy(c, reqs)
	}
	if err == nil {
		var errs []error
		decs, errs = s.cfg.DecideAll(ctx, c, reqs)
		err = decision.First(errs)
	}
	if err != nil {
		return nil, protoconv.GRPCStatus(protoconv.ToConnectError(ctx, s.cfg.Logger, err))
	}
	parts := a.parts
	var headersOf *decide.Decision
	degraded := "" // the first degraded descriptor's reason
	// As envoyproxy/ratelimit: the call is over when a descriptor of no
	// quota is, or when every quota descriptor is.
	var overRate, quotas, overQuota int
	for i := range decs {
		dec, p := &decs[i], &parts[i]
		if dec.Degraded && degraded == "" {
			degraded = dec.Degradation.Reason()
		}
		st := &p.st
		st.Code = rlsv3.RateLimitResponse_OK
		at := shown(dec)
		// Under QuotaMode a descriptor without a limit is a quota too
		// (never over), as upstream counts it; an unlimited one never is.
		quota := at < 0 && s.cfg.QuotaMode || at >= 0 && !unlimited(dec.Rules[at]) && (s.cfg.QuotaMode || dec.Rules[at].Rule.Quota)
		if quota {
			quotas++
		}
		if !dec.Allowed {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			if out.RawBody == nil && dec.Deciding >= 0 {
				// Envoy answers the first rejecting rule's message as its
				// 429's body.
				if m := decision.RejectionMessage(dec.Rules[dec.Deciding]); m != "" {
					out.RawBody = []byte(m)
				}
			}
			if quota {
				overQuota++
			} else {
				overRate++
			}
		}
		switch {
		case at < 0:
		case unlimited(dec.Rules[at]):
			// envoyproxy/ratelimit's unlimited: no limit, all remaining.
			st.LimitRemaining = math.MaxUint32
		default:
			rr := dec.Rules[at]
			setEnvoyLimit(&p.limit, rr)
			st.CurrentLimit = &p.limit
			st.LimitRemaining = uint32(min(max(rr.Remaining, 0), math.MaxUint32))
			if !dec.Allowed {
				st.LimitRemaining = 0 // as envoyproxy/ratelimit: what is over has none left to give
			}
			p.reset.Seconds, p.reset.Nanos = int64(rr.ResetAfter/time.Second), int32(rr.ResetAfter%time.Second)
			st.DurationUntilReset = &p.reset
			if at == dec.Deciding && (headersOf == nil || headersOf.Allowed) {
				headersOf = dec
			}
		}
		out.Statuses[i] = st
	}
	if overRate > 0 || quotas > 0 && overQuota == quotas {
		out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	} else {
		out.RawBody = nil
	}
	if headersOf != nil {
		var rules [8]rlheaders.Rule
		keys, vals := rlheaders.AppendValues(a.keys[:0], a.vals[:0], s.cfg.Headers, decision.AppendHeaderRules(rules[:0], *headersOf), headersOf.Deciding, headersOf.Allowed)
		hv := a.hv[:0]
		for i := range keys {
			hv = append(hv, corev3.HeaderValue{Key: keys[i], Value: vals[i]})
		}
		out.ResponseHeadersToAdd = a.hvp[:0]
		for i := range hv {
			out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &hv[i])
		}
	}
	if degraded != "" {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: decision.DegradedHeader, Value: degraded})
	}
	return out, nil
}

// answer is what an answer to one RateLimitRequest allocates, in one
// allocation for a request of up to 4 descriptors of 8 entries in all, and
// up to 4 rate limit headers (most of them): the response, each
// descriptor's decide.Request, status, limit and reset, and the headers.
type answer struct {
	out      rlsv3.RateLimitResponse
	statuses [4]*rlsv3.RateLimitResponse_DescriptorStatus
	reqs     []decide.Request
	reqArr   [4]decide.Request
	parts    []part
	partArr  [4]part
	descs    []policy.Descriptor
	descArr  [8]policy.Descriptor
	keys     [4]string
	vals     [4]string
	hv       [4]corev3.HeaderValue
	hvp      [4]*corev3.HeaderValue
}

// part is a descriptor's status, limit and reset.
type part struct {
	st    rlsv3.RateLimitResponse_DescriptorStatus
	limit rlsv3.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

func newAnswer(req *rlsv3.RateLimitRequest) *answer {
	n := len(req.Descriptors)
	a := &answer{}
	a.out.OverallCode = rlsv3.RateLimitResponse_OK
	if n <= len(a.statuses) {
		a.out.Statuses, a.reqs, a.parts = a.statuses[:n], a.reqArr[:n], a.partArr[:n]
	} else {
		a.out.Statuses, a.reqs, a.parts = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n), make([]decide.Request, n), make([]part, n)
	}
	a.descs = a.descArr[:0]
	return a
}

// shown is the index in dec.Rules of the rule a descriptor's status
// describes: the deciding one, else (every rule in shadow) the one with
// the least remaining, as envoyproxy/ratelimit describes a shadow_mode
// limit; -1 when none applied.
func shown(dec *decide.Decision) int {
	if dec.Deciding >= 0 || dec.Cached {
		return dec.Deciding
	}
	at := -1
	for i, r := range dec.Rules {
		if at < 0 || r.Remaining < dec.Rules[at].Remaining {
			at = i
		}
	}
	return at
}

// unlimited reports whether r is envoyproxy/ratelimit's unlimited, as
// Sluice imports it: a shadow rule of policy.MaxLimit.
func unlimited(r decide.RuleResult) bool {
	return r.Rule.Shadow && r.InForce().Limit == policy.MaxLimit
}

// crowded answers a request of n descriptors of a tenant refused at the
// door (decision.Service.Door): every descriptor OVER_LIMIT, degraded by
// overload, decided by nothing. It is an answer, not an error, so that
// Envoy rejects the request whatever its failure_mode_deny: an error would
// admit it by default.
func crowded(n int) *rlsv3.RateLimitResponse {
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n),
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "Retry-After", Value: "1"}, {Key: decision.DegradedHeader, Value: decide.Shed.Reason()}}}
	for i := range out.Statuses {
		out.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT}
	}
	return out
}

// envoyUnits are Envoy's units, largest first.
var envoyUnits = []struct {
	d    time.Duration
	unit rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR},
	{30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}

// requestLimit is the limit an Envoy descriptor brings, or a field error.
func requestLimit(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (*decide.RequestLimit, error) {
	var unit time.Duration
	for _, u := range envoyUnits {
		if u.unit == rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit()) {
			unit = u.d
		}
	}
	n := int64(1)
	if o.GetUnitMultiplier() != nil {
		n = int64(o.GetUnitMultiplier().GetValue())
	}
	var field, problem string
	switch {
	case unit == 0:
		field, problem = "limit.unit", "must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR"
	case o.GetRequestsPerUnit() < 1 || o.GetRequestsPerUnit() > policy.MaxLimit:
		field, problem = "limit.requests_per_unit", fmt.Sprintf("must be between 1 and %d", policy.MaxLimit)
	case n < 1 || n > int64(policy.MaxWindow/unit):
		field, problem = "limit.unit_multiplier", fmt.Sprintf("must make a period of at most %v", policy.MaxWindow)
	default:
		return &decide.RequestLimit{Requests: int64(o.GetRequestsPerUnit()), Window: time.Duration(n) * unit}, nil
	}
	return nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid descriptor",
		Fields: []policy.FieldError{{Field: field, Description: problem}}}
}

// setEnvoyLimit states a rule's limit in Envoy's terms: requests per the
// largest unit dividing its window, times a multiplier when the window is
// several units. A blocking rule's limit is 0, as envoyproxy/ratelimit
// states its requests_per_unit: 0.
func setEnvoyLimit(l *rlsv3.RateLimitResponse_RateLimit, r decide.RuleResult) {
	p := r.InForce() // an override's limit and window, for its client
	l.Name, l.RequestsPerUnit = r.Rule.Name, uint32(min(max(p.Limit, 0), math.MaxUint32))
	if r.Rule.Block {
		l.RequestsPerUnit = 0
	}
	for _, u := range envoyUnits {
		if w := p.Period(); w >= u.d && w%u.d == 0 {
			l.Unit = u.unit
			if n := w / u.d; n > 1 {
				l.UnitMultiplier = wrapperspb.UInt32(uint32(min(int64(n), math.MaxUint32)))
			}
			break
		}
	}
}
