package envoyrls

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
	"github.com/sluicehq/sluice/internal/rlheaders"
)

// call is one Envoy request and its answer in Sluice's terms, whether the
// request came as a protobuf message (grpc-go's server) or straight off
// the wire (the decider's own, grpcserve). One pooled allocation holds a
// call of up to 4 descriptors of 8 entries in all.
type call struct {
	domain     string
	hitsAddend uint32
	descs      []descriptor        // the request's descriptors
	entries    []policy.Descriptor // every descriptor's entries, in order
	reqs       []decide.Request    // each descriptor's decision request

	// The answer.
	over       bool     // its overall code: OVER_LIMIT, else OK
	statuses   []status // one per descriptor
	rawBody    string
	keys, vals []string // the headers to add
	hdr        []byte   // the values' bytes: vals may be views of it (kept by Recycle)

	descArr        [4]descriptor
	entryArr       [8]policy.Descriptor
	reqArr         [4]decide.Request
	stArr          [4]status
	keyArr, valArr [10]string
	decArr         [1]decide.Decision // a single descriptor's decision
	errArr         [1]error
}

// descriptor is one Envoy descriptor: its entries are call.entries[from:to].
type descriptor struct {
	from, to int
	limit    override // the limit it brings, when hasLimit
	hasLimit bool
	hits     uint64 // its hits_addend, when hasHits
	hasHits  bool
}

// override is a descriptor's limit (RateLimitOverride), as sent.
type override struct {
	requestsPerUnit uint32
	unit            int32
	multiplier      uint32 // when hasMultiplier
	hasMultiplier   bool
}

// status is a descriptor's status. Its limit is the rule's that decided
// it, stated in Envoy's terms, when hasLimit.
type status struct {
	over            bool
	remaining       uint32
	hasLimit        bool
	name            string
	requestsPerUnit uint32
	unit            rlsv3.RateLimitResponse_RateLimit_Unit
	multiplier      uint32 // none when 0
	reset           time.Duration
}

var callPool = sync.Pool{New: func() any { return new(call) }}

// newCall returns an empty call from the pool.
func newCall() *call {
	c := callPool.Get().(*call)
	c.descs, c.entries, c.reqs = c.descArr[:0], c.entryArr[:0], c.reqArr[:0]
	c.statuses, c.keys, c.vals = c.stArr[:0], c.keyArr[:0], c.valArr[:0]
	return c
}

// Recycle gives c back to the pool once its answer is written
// (grpcserve.Recycler).
func (c *call) Recycle() {
	hdr := c.hdr[:0]
	*c = call{hdr: hdr}
	callPool.Put(c)
}

// addDescriptor appends an empty descriptor and returns it.
func (c *call) addDescriptor() *descriptor {
	c.descs = append(c.descs, descriptor{from: len(c.entries), to: len(c.entries)})
	return &c.descs[len(c.descs)-1]
}

// answer decides c's request and fills its answer: a status per
// descriptor, the overall code (OVER_LIMIT when any descriptor is, but
// for quotas: see policy.Rule.Quota and decision.Service.QuotaMode), and
// the rate limit headers of the deciding rule of the first rejected
// descriptor (else of the last one with a rule) for Envoy to add to the
// response. Its error is a gRPC status.
func (s *RLS) answer(ctx context.Context, c *call) error {
	ctx = s.cfg.TracedMetadata(ctx)
	t, err := s.cfg.Authorize(decision.Metadata(ctx)("authorization"), decision.PeerOf(ctx))
	if err != nil {
		return protoconv.GRPCStatus(protoconv.ToConnectError(ctx, s.cfg.Logger, err))
	}
	switch {
	case c.domain != t.Tenant.Slug:
		return protoconv.GRPCError(policy.CodePermissionDenied, fmt.Sprintf("domain %q is not this key's tenant", c.domain))
	case len(c.descs) == 0:
		return protoconv.GRPCError(policy.CodeInvalid, "descriptors: at least one")
	case len(c.descs) > MaxDescriptors:
		return protoconv.GRPCError(policy.CodeInvalid, fmt.Sprintf("descriptors: at most %d", MaxDescriptors))
	}
	if s.cfg.Door(t) != nil {
		c.crowded()
		return nil
	}
	var limitErrs []error // of descriptors' limits, when any is invalid
	for i := range c.descs {
		d := &c.descs[i]
		var r decide.Request
		if d.hasLimit {
			l, err := requestLimit(d.limit)
			if err != nil {
				if limitErrs == nil {
					limitErrs = make([]error, len(c.descs))
				}
				limitErrs[i] = err
			}
			r.Limit = l
		}
		r.Cost = int64(c.hitsAddend)
		if d.hasHits {
			r.Cost = int64(min(d.hits, math.MaxInt32))
		}
		r.Peek = d.hasHits && r.Cost == 0
		r.Descriptors = c.entries[d.from:d.to:d.to]
		c.reqs = append(c.reqs, r)
	}
	reqs := c.reqs
	err = decision.RefuseAny("descriptors", len(reqs), func(i int) error {
		if limitErrs != nil && limitErrs[i] != nil {
			return limitErrs[i]
		}
		return s.cfg.Validate(t, reqs[i])
	})
	if err == nil {
		s.cfg.ReplacedBy(t, reqs)
	}
	var decs []decide.Decision
	if err == nil {
		var errs []error
		decs, errs = s.cfg.DecideAllInto(ctx, t, reqs, c.decArr[:0], c.errArr[:0])
		err = decision.First(errs)
	}
	if err != nil {
		return protoconv.GRPCStatus(protoconv.ToConnectError(ctx, s.cfg.Logger, err))
	}
	s.fill(c, decs)
	return nil
}

// fill states decs, the decisions of c's descriptors, as c's answer.
func (s *RLS) fill(c *call, decs []decide.Decision) {
	var headersOf *decide.Decision
	degraded := "" // the first degraded descriptor's reason
	// As envoyproxy/ratelimit: the call is over when a descriptor of no
	// quota is, or when every quota descriptor is.
	var overRate, quotas, overQuota int
	for i := range decs {
		dec := &decs[i]
		if dec.Degraded && degraded == "" {
			degraded = dec.Degradation.Reason()
		}
		var st status
		at := shown(dec)
		// Under QuotaMode a descriptor without a limit is a quota too
		// (never over), as upstream counts it; an unlimited one never is.
		quota := at < 0 && s.cfg.QuotaMode || at >= 0 && !unlimited(dec.Rules[at]) && (s.cfg.QuotaMode || dec.Rules[at].Rule.Quota)
		if quota {
			quotas++
		}
		if !dec.Allowed {
			st.over = true
			if c.rawBody == "" && dec.Deciding >= 0 {
				// Envoy answers the first rejecting rule's message as its
				// 429's body.
				c.rawBody = decision.RejectionMessage(dec.Rules[dec.Deciding])
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
			st.remaining = math.MaxUint32
		default:
			rr := dec.Rules[at]
			st.setLimit(rr)
			st.remaining = uint32(min(max(rr.Remaining, 0), math.MaxUint32))
			if !dec.Allowed {
				st.remaining = 0 // as envoyproxy/ratelimit: what is over has none left to give
			}
			st.reset = rr.ResetAfter
			if at == dec.Deciding && (headersOf == nil || headersOf.Allowed) {
				headersOf = dec
			}
		}
		c.statuses = append(c.statuses, st)
	}
	c.over = overRate > 0 || quotas > 0 && overQuota == quotas
	if !c.over {
		c.rawBody = ""
	}
	if headersOf != nil {
		var rules [8]rlheaders.Rule
		c.hdr, c.keys, c.vals = rlheaders.AppendValuesTo(c.hdr[:0], c.keys, c.vals, s.cfg.Headers, decision.AppendHeaderRules(rules[:0], *headersOf), headersOf.Deciding, headersOf.Allowed)
	}
	if degraded != "" {
		c.keys, c.vals = append(c.keys, decision.DegradedHeader), append(c.vals, degraded)
	}
}

// crowded answers a request refused at the door
// (decision.Service.Door): every descriptor OVER_LIMIT, degraded by
// overload, decided by nothing. It is an answer, not an error, so that
// Envoy rejects the request whatever its failure_mode_deny: an error would
// admit it by default.
func (c *call) crowded() {
	c.over = true
	for range c.descs {
		c.statuses = append(c.statuses, status{over: true})
	}
	c.keys = append(c.keys, "Retry-After", decision.DegradedHeader)
	c.vals = append(c.vals, "1", decide.Shed.Reason())
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
func requestLimit(o override) (*decide.RequestLimit, error) {
	var unit time.Duration
	for _, u := range envoyUnits {
		if u.unit == rlsv3.RateLimitResponse_RateLimit_Unit(o.unit) {
			unit = u.d
		}
	}
	n := int64(1)
	if o.hasMultiplier {
		n = int64(o.multiplier)
	}
	var field, problem string
	switch {
	case unit == 0:
		field, problem = "limit.unit", "must be SECOND, MINUTE, HOUR, DAY, MONTH or YEAR"
	case o.requestsPerUnit < 1 || o.requestsPerUnit > policy.MaxLimit:
		field, problem = "limit.requests_per_unit", fmt.Sprintf("must be between 1 and %d", policy.MaxLimit)
	case n < 1 || n > int64(policy.MaxWindow/unit):
		field, problem = "limit.unit_multiplier", fmt.Sprintf("must make a period of at most %v", policy.MaxWindow)
	default:
		return &decide.RequestLimit{Requests: int64(o.requestsPerUnit), Window: time.Duration(n) * unit}, nil
	}
	return nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid descriptor",
		Fields: []policy.FieldError{{Field: field, Description: problem}}}
}

// setLimit states a rule's limit in Envoy's terms: requests per the
// largest unit dividing its window, times a multiplier when the window is
// several units. A blocking rule's limit is 0, as envoyproxy/ratelimit
// states its requests_per_unit: 0.
func (st *status) setLimit(r decide.RuleResult) {
	p := r.InForce() // an override's limit and window, for its client
	st.hasLimit = true
	st.name, st.requestsPerUnit = r.Rule.Name, uint32(min(max(p.Limit, 0), math.MaxUint32))
	if r.Rule.Block {
		st.requestsPerUnit = 0
	}
	for _, u := range envoyUnits {
		if w := p.Period(); w >= u.d && w%u.d == 0 {
			st.unit = u.unit
			if n := w / u.d; n > 1 {
				st.multiplier = uint32(min(int64(n), math.MaxUint32))
			}
			break
		}
	}
}
