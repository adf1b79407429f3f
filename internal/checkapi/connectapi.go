package checkapi

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/adaptive"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	sluicev1 "github.com/sluicehq/sluice/internal/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/protoconv"
)

// MaxBatch bounds the checks of one CheckBatch call.
const MaxBatch = 100

// NewDecisionService returns the path and handler of sluice.v1.DecisionService
// (Connect, gRPC and gRPC-Web), authenticated by the tenant's check key.
func NewDecisionService(cfg decision.Service) (string, http.Handler) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	maxBytes := cfg.MaxBodyBytes
	if maxBytes <= 0 {
		maxBytes = decision.DefaultMaxBodyBytes
	}
	// Answers go out uncompressed: they are small, and gzip would cost more
	// CPU than a whole decision (compressed requests are still read).
	return sluicev1connect.NewDecisionServiceHandler(decisionServer{cfg}, connect.WithReadMaxBytes(int(maxBytes)),
		connect.WithCompressMinBytes(math.MaxInt), protoconv.StrictJSON())
}

type decisionServer struct{ cfg decision.Service }

func (s decisionServer) Check(ctx context.Context, req *connect.Request[sluicev1.CheckRequest]) (*connect.Response[sluicev1.CheckResponse], error) {
	res, err := s.checkOne(decision.WithPeer(s.cfg.TracedHeader(ctx, req.Header()), req.Peer().Addr), req.Header().Get("Authorization"), req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

func (s decisionServer) CheckBatch(ctx context.Context, req *connect.Request[sluicev1.CheckBatchRequest]) (*connect.Response[sluicev1.CheckBatchResponse], error) {
	res, err := s.checkBatch(decision.WithPeer(s.cfg.TracedHeader(ctx, req.Header()), req.Peer().Addr), req.Header().Get("Authorization"), req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

func (s decisionServer) Reset(ctx context.Context, req *connect.Request[sluicev1.ResetRequest]) (*connect.Response[sluicev1.ResetResponse], error) {
	res, err := s.reset(decision.WithPeer(ctx, req.Peer().Addr), req.Header().Get("Authorization"), req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

// reset is Reset, whatever serves it (see checkOne).
func (s decisionServer) reset(ctx context.Context, auth string, m *sluicev1.ResetRequest) (*sluicev1.ResetResponse, error) {
	c, err := s.cfg.Authorize(auth, decision.PeerOf(ctx))
	if err != nil {
		return nil, protoconv.ToConnectError(ctx, s.cfg.Logger, err)
	}
	req := decide.Request{Tier: m.GetTier(), Descriptors: descriptorsFromProto(m.GetDescriptors())}
	if err := refuseDuplicateKeys(req.Descriptors); err != nil {
		return nil, protoconv.ToConnectError(ctx, s.cfg.Logger, err)
	}
	rules, err := s.cfg.Reset(ctx, c, req)
	if err != nil {
		return nil, protoconv.ToConnectError(ctx, s.cfg.Logger, err)
	}
	out := &sluicev1.ResetResponse{Rules: make([]*sluicev1.ResetRule, len(rules))}
	for i, r := range rules {
		out.Rules[i] = &sluicev1.ResetRule{RuleId: r.ID, RuleName: r.Name}
	}
	return out, nil
}

// authorizeCheck authorizes a check's caller and passes its tenant
// through the door (decision.Service.Door): over gRPC the door refused a
// crowding tenant before the message was read; over Connect the message
// is read first, and refused here all the same. It fails with a Connect
// error.
func (s decisionServer) authorizeCheck(ctx context.Context, auth string) (*decide.Compiled, error) {
	c, err := s.cfg.Authorize(auth, decision.PeerOf(ctx))
	if err == nil {
		err = s.cfg.Door(c)
	}
	if err != nil {
		return nil, protoconv.ToConnectError(ctx, s.cfg.Logger, err)
	}
	return c, nil
}

// checkOne and checkBatch are the service, whatever serves it: they
// authenticate the caller from its Authorization header and answer, or
// fail with a Connect error.
func (s decisionServer) checkOne(ctx context.Context, auth string, m *sluicev1.CheckRequest) (*sluicev1.CheckResponse, error) {
	c, err := s.authorizeCheck(ctx, auth)
	if err != nil {
		return nil, err
	}
	req := checkRequest(m)
	if err := refuseDuplicateKeys(req.Descriptors); err != nil {
		return nil, protoconv.ToConnectError(ctx, s.cfg.Logger, err)
	}
	return s.check(ctx, c, m, req)
}

func (s decisionServer) checkBatch(ctx context.Context, auth string, m *sluicev1.CheckBatchRequest) (*sluicev1.CheckBatchResponse, error) {
	c, err := s.authorizeCheck(ctx, auth)
	if err != nil {
		return nil, err
	}
	if n := len(m.GetRequests()); n > MaxBatch {
		return nil, protoconv.ToConnectError(ctx, s.cfg.Logger, &policy.Error{Code: policy.CodeInvalid, Message: "invalid batch",
			Fields: []policy.FieldError{{Field: "requests", Description: "at most 100 checks per batch"}}})
	}
	reqs := make([]decide.Request, len(m.GetRequests()))
	for i, r := range m.GetRequests() {
		reqs[i] = checkRequest(r)
	}
	err = decision.RefuseAny("requests", len(reqs), func(i int) error {
		if err := refuseRelease(m.Requests[i]); err != nil {
			return err
		}
		if err := refuseDuplicateKeys(reqs[i].Descriptors); err != nil {
			return err
		}
		return s.cfg.Validate(c, reqs[i])
	})
	if err != nil {
		return nil, protoconv.ToConnectError(ctx, s.cfg.Logger, err)
	}
	out := &sluicev1.CheckBatchResponse{Responses: make([]*sluicev1.CheckResponse, len(reqs))}
	// Releases first, each on its own; then the checks, decided at once.
	var checks []decide.Request
	var at []int
	for i, r := range m.GetRequests() {
		if r.GetRelease() {
			if out.Responses[i], err = s.check(ctx, c, r, reqs[i]); err != nil {
				return nil, err
			}
			continue
		}
		checks, at = append(checks, reqs[i]), append(at, i)
	}
	if len(checks) == 0 {
		return out, nil
	}
	decs, errs := s.cfg.DecideAll(ctx, c, checks)
	if err := decision.First(errs); err != nil {
		return nil, protoconv.ToConnectError(ctx, s.cfg.Logger, err)
	}
	for k, i := range at {
		out.Responses[i] = checkResponse(decs[k], m.Requests[i].GetLease())
	}
	return out, nil
}

// checkRequest is the decision a CheckRequest asks for.
func checkRequest(m *sluicev1.CheckRequest) decide.Request {
	req := decide.Request{Tier: m.GetTier(), Cost: m.GetCost(), Lease: decision.LeaseID(m.GetLease()), Peek: m.GetPeek(),
		Descriptors: descriptorsFromProto(m.GetDescriptors())}
	if l := m.GetLimit(); l != nil {
		req.Limit = &decide.RequestLimit{Requests: l.GetRequests(), Window: l.GetWindow().AsDuration(), Algorithm: policy.Algorithm(l.GetAlgorithm())}
	}
	if m.GetRelease() {
		req.Latency, req.Outcome, _ = releaseSample(true, m.GetLatency().AsDuration(), m.GetOutcome(), "latency") // refuseRelease checked it
	}
	return req
}

// maxLatency bounds the latency a release reports.
const maxLatency = 24 * time.Hour

// releaseSample checks the latency and outcome a check gives: only with
// release, the latency from 0 to a day (field names it), the outcome
// success, dropped or ignored.
func releaseSample(release bool, latency time.Duration, outcome, field string) (time.Duration, adaptive.Outcome, error) {
	o, ok := adaptive.ParseOutcome(outcome)
	var fields []policy.FieldError
	switch {
	case !release && (latency != 0 || outcome != ""):
		fields = append(fields, policy.FieldError{Field: field, Description: "only with release: how the request a lease guarded went"})
	case latency < 0 || latency > maxLatency:
		fields = append(fields, policy.FieldError{Field: field, Description: "must be from 0 to 24h"})
	}
	if !ok {
		fields = append(fields, policy.FieldError{Field: "outcome", Description: "must be success, dropped or ignored"})
	}
	if fields != nil {
		return 0, 0, &policy.Error{Code: policy.CodeInvalid, Message: "invalid check", Fields: fields}
	}
	return latency, o, nil
}

// descriptorsFromProto converts a request's descriptors.
func descriptorsFromProto(ds []*sluicev1.Descriptor) policy.Descriptors {
	var out policy.Descriptors
	for _, d := range ds {
		out = append(out, policy.Descriptor{Key: d.GetKey(), Value: d.GetValue()})
	}
	return out
}

// refuseDuplicateKeys refuses descriptors that give a key twice, as POST
// /v1/check refuses a member twice: which value would count is the
// caller's mistake to hear of, not for the decider to pick. (Envoy's
// descriptors may repeat a key, for nested limits; the RLS takes them.)
func refuseDuplicateKeys(d policy.Descriptors) error {
	for j := 1; j < len(d); j++ {
		for i := range j {
			if d[i].Key == d[j].Key {
				return &policy.Error{Code: policy.CodeInvalid, Message: "invalid descriptors", Fields: []policy.FieldError{
					{Field: fmt.Sprintf("descriptors[%d].key", j), Description: fmt.Sprintf("%q is descriptors[%d]'s key too", d[j].Key, i)}}}
			}
		}
	}
	return nil
}

// refuseRelease refuses a release that names no lease.
func refuseRelease(m *sluicev1.CheckRequest) error {
	if m.GetRelease() && m.GetLease() == "" {
		return errReleaseWithoutLease
	}
	if _, _, err := releaseSample(m.GetRelease(), m.GetLatency().AsDuration(), m.GetOutcome(), "latency"); err != nil {
		return err
	}
	return nil
}

// errReleaseWithoutLease refuses a release that names no lease, on every
// API of this package.
var errReleaseWithoutLease = &policy.Error{Code: policy.CodeInvalid, Message: "invalid release",
	Fields: []policy.FieldError{{Field: "lease", Description: "required to release a lease"}}}

// check answers m, which asks for req.
func (s decisionServer) check(ctx context.Context, c *decide.Compiled, m *sluicev1.CheckRequest, req decide.Request) (*sluicev1.CheckResponse, error) {
	if err := refuseRelease(m); err != nil {
		return nil, protoconv.ToConnectError(ctx, s.cfg.Logger, err)
	}
	if m.GetRelease() {
		if err := s.cfg.Release(ctx, c, req); err != nil {
			return nil, protoconv.ToConnectError(ctx, s.cfg.Logger, err)
		}
		return &sluicev1.CheckResponse{Allowed: true, Deciding: -1, ConfigVersion: c.Version}, nil
	}
	dec, err := s.cfg.Decide(ctx, c, req)
	if err != nil {
		return nil, protoconv.ToConnectError(ctx, s.cfg.Logger, err)
	}
	return checkResponse(dec, m.GetLease()), nil
}

// checkResponse is the answer of dec, the decision of a check naming lease.
func checkResponse(dec decide.Decision, lease string) *sluicev1.CheckResponse {
	out := &sluicev1.CheckResponse{Allowed: dec.Allowed, Deciding: int32(dec.Deciding), ConfigVersion: dec.Version,
		Lease: decision.HeldLease(dec, lease), Degraded: dec.Degradation.Reason()}
	for _, r := range dec.Rules {
		out.Rules = append(out.Rules, ruleStatus(r))
	}
	return out
}

func ruleStatus(r decide.RuleResult) *sluicev1.RuleStatus {
	d := func(v time.Duration) *durationpb.Duration {
		if v == 0 {
			return nil
		}
		return durationpb.New(v)
	}
	st := &sluicev1.RuleStatus{RuleId: r.Rule.ID, RuleName: r.Rule.Name, Allowed: r.Allowed, Shadow: r.Rule.Shadow,
		Limit: r.Limit, Remaining: r.Remaining, ResetAfter: d(r.ResetAfter), Delay: d(r.Delay), Window: d(r.InForce().Period()),
		Message: decision.RejectionMessage(r), Quota: decision.Quota(r), Unenforced: r.Unenforced}
	if !r.Allowed && r.RetryAfter != limit.Never {
		st.RetryAfter = durationpb.New(r.RetryAfter)
	}
	return st
}
