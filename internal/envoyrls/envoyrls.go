// Package envoyrls serves Envoy's rate limit service
// (envoy.service.ratelimit.v3) over the decision service: Register puts it
// on a decider's gRPC server.
package envoyrls

import (
	"context"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/grpcserve"
	"github.com/sluicehq/sluice/internal/policy"
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

// Register serves the rate limit service of cfg's decider on s. On the
// decider's own server (grpcserve) it reads requests and writes answers
// straight from and to their wire form, with no protobuf message between.
func Register(s grpc.ServiceRegistrar, cfg decision.Service) {
	if _, ok := s.(*grpcserve.Server); ok {
		s.RegisterService(&wireDesc, NewRLS(cfg))
		return
	}
	rlsv3.RegisterRateLimitServiceServer(s, NewRLS(cfg))
}

// ShouldRateLimit answers one Envoy request: see call.answer. grpc-go's
// server calls it; the decider's own decodes and encodes the wire form
// without it (wireDesc).
func (s *RLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	c := newCall()
	defer c.Recycle()
	c.fromProto(req)
	if err := s.answer(ctx, c); err != nil {
		return nil, err
	}
	return c.toProto(), nil
}

// fromProto fills c's request from req.
func (c *call) fromProto(req *rlsv3.RateLimitRequest) {
	c.domain, c.hitsAddend = req.GetDomain(), req.GetHitsAddend()
	for _, pd := range req.GetDescriptors() {
		d := c.addDescriptor()
		for _, e := range pd.GetEntries() {
			c.entries = append(c.entries, policy.Descriptor{Key: e.GetKey(), Value: e.GetValue()})
		}
		d.to = len(c.entries)
		if o := pd.GetLimit(); o != nil {
			d.hasLimit, d.limit = true, override{requestsPerUnit: o.GetRequestsPerUnit(), unit: int32(o.GetUnit()),
				multiplier: o.GetUnitMultiplier().GetValue(), hasMultiplier: o.GetUnitMultiplier() != nil}
		}
		if h := pd.GetHitsAddend(); h != nil {
			d.hits, d.hasHits = h.GetValue(), true
		}
	}
}

// toProto is c's answer as a protobuf message, in one allocation per
// kind of part.
func (c *call) toProto() *rlsv3.RateLimitResponse {
	out := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	if c.over {
		out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	n := len(c.statuses)
	out.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	sts, limits, resets := make([]rlsv3.RateLimitResponse_DescriptorStatus, n), make([]rlsv3.RateLimitResponse_RateLimit, n), make([]durationpb.Duration, n)
	for i, st := range c.statuses {
		ps := &sts[i]
		ps.Code, ps.LimitRemaining = rlsv3.RateLimitResponse_OK, st.remaining
		if st.over {
			ps.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if st.hasLimit {
			l := &limits[i]
			l.Name, l.RequestsPerUnit, l.Unit = st.name, st.requestsPerUnit, st.unit
			if st.multiplier != 0 {
				l.UnitMultiplier = wrapperspb.UInt32(st.multiplier)
			}
			ps.CurrentLimit = l
			resets[i].Seconds, resets[i].Nanos = int64(st.reset/time.Second), int32(st.reset%time.Second)
			ps.DurationUntilReset = &resets[i]
		}
		out.Statuses[i] = ps
	}
	if len(c.keys) > 0 {
		hs := make([]corev3.HeaderValue, len(c.keys))
		out.ResponseHeadersToAdd = make([]*corev3.HeaderValue, len(c.keys))
		for i := range c.keys {
			hs[i].Key, hs[i].Value = c.keys[i], strings.Clone(c.vals[i]) // a view of c.hdr, which outlives c's recycling
			out.ResponseHeadersToAdd[i] = &hs[i]
		}
	}
	if c.rawBody != "" {
		out.RawBody = []byte(c.rawBody)
	}
	return out
}
