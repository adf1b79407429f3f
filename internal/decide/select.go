package decide

import (
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Which rules a request meets: its validation, its tier, its rules, and
// what replaces or overrides them.

// Validate returns the error Decide would refuse req with, without
// deciding it: a caller deciding several requests at once refuses them
// all before any is counted.
func (d *Decider) Validate(c *Compiled, req Request) error {
	if err := refuse(c, req); err != nil {
		return err
	}
	var ovBuf [4]*compiledOverride
	_, _, err := c.tierOf(req.Tier, c.overrides(req.Descriptors, d.opts.Now, ovBuf[:0]))
	return err
}

// refuse refuses what no config could decide: invalid descriptors, a
// negative cost, a suspended tenant.
func refuse(c *Compiled, req Request) error {
	if err := req.Descriptors.Validate(); err != nil {
		return err
	}
	if req.Cost < 0 {
		return &policy.Error{Code: policy.CodeInvalid, Message: "invalid check",
			Fields: []policy.FieldError{{Field: "cost", Description: "must not be negative"}}}
	}
	if req.Limit != nil {
		l := req.Limit.normal()
		if !slices.Contains(RequestLimitAlgorithms, l.Algorithm) {
			return badRequestLimitAlgorithm()
		}
		p := policy.Params{Algorithm: l.Algorithm, Limit: l.Requests, Window: l.Window, Calendar: l.Calendar}
		// The counter's key names the window in whole seconds.
		const window = "must be whole seconds, from 1s to 366 days"
		var fields []policy.FieldError
		if err := p.Validate(); err != nil {
			fields = err.(*policy.Error).Fields
			for i := range fields {
				fields[i].Field = "limit." + strings.Replace(fields[i].Field, "limit", "requests", 1)
				if fields[i].Field == "limit.window" {
					fields[i].Description = window
				}
			}
		}
		if l.Window%time.Second != 0 && len(fields) == 0 {
			fields = append(fields, policy.FieldError{Field: "limit.window", Description: window})
		}
		if len(fields) > 0 {
			return &policy.Error{Code: policy.CodeInvalid, Message: "invalid check", Fields: fields}
		}
	}
	if c.Tenant.Status == policy.TenantSuspended {
		return policy.Errorf(policy.CodePermissionDenied, "tenant %s is suspended", c.Tenant.Slug)
	}
	return nil
}

// tierOf is the tier a request is decided in, its own, else an
// override's, else the tenant's default, and the tier's rules.
func (c *Compiled) tierOf(tier string, ovs []*compiledOverride) (string, []compiledRule, error) {
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
		return "", nil, &policy.Error{Code: policy.CodeInvalid, Message: "invalid check",
			Fields: []policy.FieldError{{Field: "tier", Description: "no tier " + tier + " in this tenant"}}}
	}
	return tier, rules, nil
}

// maxExpectedRules is the room a selection makes for its rules at first.
const maxExpectedRules = 8

// selection is the rules a request is decided by: for each, its counter
// request, the rule, and the parameters in force (an override's or its own).
type selection struct {
	tier string
	// blocked, when set, is the rule of an override blocking the client's
	// every request: the request is rejected by it, nothing else asked.
	blocked *policy.Rule
	// blocks is set when a rule picked blocks (Rule.Block): only then
	// does a decision look for them.
	blocks bool
	// leases is set when a rule picked is a concurrency rule; adaptive
	// when one is an adaptive one.
	leases, adaptive bool
	// global is set when a rule picked holds across regions
	// (policy.ScopeGlobal).
	global bool
	// reqs, picked and params are the rules that apply, in order.
	reqs   []limit.Request
	picked []*policy.Rule
	params []policy.Params
	// one, for a tier of one rule, holds the slices above and the
	// decision's results: one allocation in place of five.
	one *oneRule
}

// oneRule is the backing of a one-rule decision's slices.
type oneRule struct {
	reqs   [1]limit.Request
	picked [1]*policy.Rule
	params [1]policy.Params
	res    [1]limit.Result
	rules  [1]RuleResult
	call   [1]limit.Call
}

// selectRules picks the rules of req's tier (its own, else an override's,
// else the tenant's default) that match its descriptors, with overrides
// applied.
func (d *Decider) selectRules(c *Compiled, req Request, cost int64) (selection, error) {
	var ovBuf [4]*compiledOverride
	ovs := c.overrides(req.Descriptors, d.opts.Now, ovBuf[:0])
	tier, rules, err := c.tierOf(req.Tier, ovs)
	if err != nil {
		return selection{}, err
	}
	sel := selection{tier: tier}
	for _, o := range ovs {
		if o.Block && o.RuleID == "" {
			sel.blocked = o.blockRule
			return sel, nil
		}
	}
	var cbuf [indexFrom]int32
	cand := c.indexes[tier].candidates(len(rules), req.Descriptors, cbuf[:0])
	only := "" // with an overridden request limit, the rules naming this descriptor
	if req.Limit != nil && req.Limit.OverriddenBy != "" && overridden(rules, cand, req.Descriptors, req.Limit.OverriddenBy) {
		only = req.Limit.OverriddenBy
	} else if req.Limit != nil {
		rule, lim := c.requestRule(*req.Limit, req.Descriptors)
		sel.one = new(oneRule)
		sel.reqs, sel.picked, sel.params = sel.one.reqs[:0], sel.one.picked[:0], sel.one.params[:0]
		key := policy.AppendRequestKey(nil, c.Tenant.ID, rule.ID, req.Descriptors)
		sel.reqs = append(sel.reqs, limit.Request{Key: string(key), Limiter: lim, Cost: cost, Shadow: rule.Shadow})
		sel.picked = append(sel.picked, rule)
		sel.params = append(sel.params, rule.Params)
		return sel, nil
	}
	if len(rules) == 1 {
		sel.one = new(oneRule)
		sel.reqs, sel.picked, sel.params = sel.one.reqs[:0], sel.one.picked[:0], sel.one.params[:0]
	} else {
		// Room for the rules a request commonly meets, not for the whole
		// tier: a tier of a thousand rules (imported routes, overrides kept
		// as rules) would otherwise clear and collect a thousand entries a
		// decision.
		n := min(len(rules), maxExpectedRules)
		sel.reqs, sel.picked, sel.params = make([]limit.Request, 0, n), make([]*policy.Rule, 0, n), make([]policy.Params, 0, n)
	}
	var kb [128]byte // most keys fit: one allocation each, the string's
	key := kb[:0]
	exact := 0
	for _, i := range cand {
		r := &rules[i]
		if !r.Matches(req.Descriptors) || only != "" && !names(&r.Rule, only) {
			continue
		}
		lim, p, rule := r.limiter, r.Params, &r.Rule
		for _, o := range ovs {
			switch {
			case o.RuleID != r.ID:
			case o.Block: // the rule blocks this client, whatever else
				rule = o.blockRule
			case o.limiter != nil && rule == &r.Rule:
				lim, p = o.limiter, *o.Params
			}
		}
		key = policy.AppendCounterKey(key[:0], c.Tenant.ID, &r.Rule, req.Descriptors)
		ks := string(key)
		if p.Algorithm == policy.AdaptiveConcurrency && d.opts.Adaptive != nil {
			p, lim = d.opts.Adaptive.Params(ks, Backend{Tenant: c.Tenant.Slug, Rule: &r.Rule, Descriptors: req.Descriptors}, p)
			sel.adaptive = true
		}
		sel.reqs = append(sel.reqs, limit.Request{Key: ks, Limiter: lim, Cost: cost, Lease: req.Lease, Shadow: r.Shadow, Sync: r.Sync})
		if r.parts != nil && p.Algorithm == policy.AdaptiveConcurrency {
			sel.reqs[len(sel.reqs)-1].Partition = &r.parts[r.PartitionOf(req.Descriptors)]
		}
		sel.picked = append(sel.picked, rule)
		sel.params = append(sel.params, p)
		sel.blocks = sel.blocks || rule.Block
		sel.leases = sel.leases || p.Algorithm.Leases()
		sel.global = sel.global || rule.Scope == policy.ScopeGlobal
		if r.Exact {
			exact++
		}
	}
	if exact > 1 {
		sel.keepMostSpecific()
	}
	if c.replaces || len(req.Replaced) > 0 {
		sel.dropReplaced(req.Replaced)
	}
	return sel, nil
}

// overridden reports whether a rule of rules (of the candidates cand)
// matches ds with a condition on descriptor key
// (RequestLimit.OverriddenBy).
func overridden(rules []compiledRule, cand []int32, ds policy.Descriptors, key string) bool {
	for _, i := range cand {
		if names(&rules[i].Rule, key) && rules[i].Matches(ds) {
			return true
		}
	}
	return false
}

// names reports whether r's match has a condition on descriptor key.
func names(r *policy.Rule, key string) bool {
	return slices.ContainsFunc(r.Match, func(m policy.Match) bool { return m.Key == key })
}

// dropReplaced drops the rules of sel that replaced names, or that another
// rule of sel replaces.
func (sel *selection) dropReplaced(replaced map[string]bool) {
	var byPicked []string // what the picked rules replace, taken before any is dropped
	for _, r := range sel.picked {
		byPicked = append(byPicked, r.Replaces...)
	}
	n := 0
	for i, r := range sel.picked {
		if !replaced[r.Name] && !slices.Contains(byPicked, r.Name) {
			sel.reqs[n], sel.picked[n], sel.params[n] = sel.reqs[i], sel.picked[i], sel.params[i]
			n++
		}
	}
	sel.reqs, sel.picked, sel.params = sel.reqs[:n], sel.picked[:n], sel.params[:n]
}

// Replacing returns the names of the rules that the rules req meets
// replace (Rule.Replaces), for the other requests of the same call
// (Request.Replaced); nil when none.
func (d *Decider) Replacing(c *Compiled, req Request) []string {
	if !c.replaces {
		return nil
	}
	sel, err := d.selectRules(c, req, 1)
	if err != nil {
		return nil // the decision itself reports it
	}
	var out []string
	for _, r := range sel.picked {
		out = append(out, r.Replaces...)
	}
	return out
}

// keepMostSpecific drops the exact rules of sel that a more specific exact
// rule of sel overrides (policy.Rule.MoreSpecific).
func (sel *selection) keepMostSpecific() {
	overridden := make([]bool, len(sel.picked))
	for i, r := range sel.picked {
		for _, s := range sel.picked {
			if r.Exact && s.Exact && r.MoreSpecific(s) {
				overridden[i] = true
				break
			}
		}
	}
	n := 0
	for i := range sel.picked {
		if !overridden[i] {
			sel.reqs[n], sel.picked[n], sel.params[n] = sel.reqs[i], sel.picked[i], sel.params[i]
			n++
		}
	}
	sel.reqs, sel.picked, sel.params = sel.reqs[:n], sel.picked[:n], sel.params[:n]
}
