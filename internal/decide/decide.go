package decide

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Engine answers a decision's rule requests all-or-nothing (see
// limit.Engine.AllowAll): the in-process engine, or Redis.
type Engine interface {
	AllowAll(ctx context.Context, reqs []limit.Request, res []limit.Result) (bool, error)
}

// LocalEngine runs decisions on the in-process engine, with the time from Now.
type LocalEngine struct {
	Engine *limit.Engine
	Now    func() time.Time
}

// AllowAll implements Engine; it never fails.
func (l LocalEngine) AllowAll(_ context.Context, reqs []limit.Request, res []limit.Result) (bool, error) {
	return l.Engine.AllowAll(reqs, l.Now().UnixMicro(), res), nil
}

// Request is one check.
type Request struct {
	// Tier to apply; empty means the client's override tier, else the
	// tenant's default tier.
	Tier        string
	Descriptors policy.Descriptors
	Cost        int64 // 0 means 1
	Lease       int64 // concurrency rules' lease id
}

// RuleResult is one rule's answer within a decision.
type RuleResult struct {
	Rule *policy.Rule // points into the immutable Config
	limit.Result
}

// Decision is the answer to a Request.
type Decision struct {
	Allowed bool
	// Deciding indexes Rules: the rule that denied, or the most restrictive
	// one when allowed; -1 when no enforced rule applied.
	Deciding int
	Rules    []RuleResult
	Version  int64 // the config version enforced
}

// Decider decides requests against compiled configs. It is safe for
// concurrent use.
type Decider struct {
	engine Engine
	now    func() time.Time
}

// New returns a Decider using engine; now (usually time.Now) dates
// overrides' expiry.
func New(engine Engine, now func() time.Time) *Decider {
	return &Decider{engine: engine, now: now}
}

// Decide evaluates req against the tenant config c. Invalid input returns a
// policy error with CodeInvalid and field details; an engine failure is
// returned as is.
func (d *Decider) Decide(ctx context.Context, c *Config, req Request) (Decision, error) {
	if err := req.Descriptors.Validate(); err != nil {
		return Decision{}, err
	}
	if req.Cost < 0 {
		return Decision{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid check",
			Fields: []policy.FieldError{{Field: "cost", Description: "must not be negative"}}}
	}
	if c.Tenant.Status == policy.TenantSuspended {
		return Decision{}, policy.Errorf(policy.CodePermissionDenied, "tenant %s is suspended", c.Tenant.Slug)
	}
	cost := req.Cost
	if cost == 0 {
		cost = 1
	}
	var ovBuf [4]*compiledOverride
	ovs := c.overrides(req.Descriptors, d.now(), ovBuf[:0])
	tier := req.Tier
	for _, o := range ovs {
		if tier == "" && o.Tier != "" {
			tier = o.Tier
		}
	}
	if tier == "" {
		tier = c.Tenant.DefaultTier
	}
	rules, ok := c.tiers[tier]
	if !ok {
		return Decision{}, &policy.Error{Code: policy.CodeInvalid, Message: "invalid check",
			Fields: []policy.FieldError{{Field: "tier", Description: "no tier " + tier + " in this tenant"}}}
	}

	reqs := make([]limit.Request, 0, len(rules))
	picked := make([]*policy.Rule, 0, len(rules))
	var key []byte
	for i := range rules {
		r := &rules[i]
		if !r.Matches(req.Descriptors) {
			continue
		}
		lim := r.limiter
		for _, o := range ovs {
			if o.RuleID == r.ID && o.limiter != nil {
				lim = o.limiter
				break
			}
		}
		key = policy.AppendCounterKey(key[:0], c.Tenant.ID, &r.Rule, req.Descriptors)
		reqs = append(reqs, limit.Request{Key: string(key), Limiter: lim, Cost: cost, Lease: req.Lease, Shadow: r.Shadow})
		picked = append(picked, &r.Rule)
	}
	dec := Decision{Allowed: true, Deciding: -1, Version: c.Version}
	if len(reqs) == 0 {
		return dec, nil
	}
	res := make([]limit.Result, len(reqs))
	allowed, err := d.engine.AllowAll(ctx, reqs, res)
	if err != nil {
		return Decision{}, err
	}
	dec.Allowed = allowed
	dec.Deciding = limit.Deciding(reqs, res, allowed)
	dec.Rules = make([]RuleResult, len(reqs))
	for i := range reqs {
		dec.Rules[i] = RuleResult{Rule: picked[i], Result: res[i]}
	}
	return dec, nil
}
