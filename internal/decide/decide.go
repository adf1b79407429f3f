package decide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Counters are the shared counters a Decider decides against: Redis
// (redisengine.Engine), or this process's memory (InProcess). They own
// their failure handling: a store that fails apart (a Redis Cluster's
// masters) keeps a circuit breaker per part.
type Counters interface {
	// AllowBatch answers each call of batch all-or-nothing (see
	// limit.Engine.AllowAll), writing its Allowed and results, or the Err
	// that kept it from deciding: limit.ErrOverloaded (wrapped) when the
	// call was not sent within budget for work queued in this process,
	// another error when the store failed or its breaker is open. The
	// calls are independent; a store that can sends them together (one
	// Redis pipeline). budget bounds each call (0: ctx alone).
	AllowBatch(ctx context.Context, budget time.Duration, batch []limit.Call)
	// Reset resets the counters of reqs' keys: the next request of each
	// meets a fresh limiter.
	Reset(ctx context.Context, reqs []limit.Request) error
	// Release ends the concurrency lease of each of reqs (its Lease).
	Release(ctx context.Context, reqs []limit.Request) error
	// Charge adds to the counters what the overload policy admitted
	// without them (see charger): each charge's cost on its key, at its
	// time, with no bound check. Counters whose state for an algorithm
	// does not add up leave its charges out.
	Charge(ctx context.Context, charges []limit.Charge) error
	// Breaker is the state of the counters' circuit breaker: "closed",
	// "half-open" or "open"; the worst part's when each has its own.
	Breaker() string
	// Failures counts the calls that failed (errors and timeouts; not
	// overload, nor calls an open breaker refused), for metrics.
	Failures() int64
}

// InProcess keeps the counters in this process's memory, with the time
// from Now: for a decider alone, the in-process fallback's tests, and
// tools. It never fails.
type InProcess struct {
	Engine *limit.Engine
	Now    func() time.Time
}

// AllowBatch implements Counters.
func (l InProcess) AllowBatch(_ context.Context, _ time.Duration, batch []limit.Call) {
	now := l.Now().UnixMicro()
	for i := range batch {
		c := &batch[i]
		c.Allowed, c.Err = l.Engine.AllowAll(c.Reqs, now, c.Res), nil
	}
}

// Release implements Counters.
func (l InProcess) Release(_ context.Context, reqs []limit.Request) error {
	now := l.Now().UnixMicro()
	for _, r := range reqs {
		l.Engine.Release(r.Key, r.Limiter, now, r.Lease)
	}
	return nil
}

// Reset implements Counters.
func (l InProcess) Reset(_ context.Context, reqs []limit.Request) error {
	for _, r := range reqs {
		l.Engine.Reset(r.Key, r.Limiter)
	}
	return nil
}

// Charge implements Counters: the in-process counters decide every
// request, so nothing is admitted without them.
func (InProcess) Charge(context.Context, []limit.Charge) error { return nil }

// Breaker implements Counters: memory has none.
func (InProcess) Breaker() string { return "closed" }

// Failures implements Counters: memory does not fail.
func (InProcess) Failures() int64 { return 0 }

// Request is one check.
type Request struct {
	// Tier to apply; empty means the client's override tier, else the
	// tenant's default tier.
	Tier        string
	Descriptors policy.Descriptors
	Cost        int64 // 0 means 1
	// Lease is the id of the lease a concurrency rule the request meets
	// takes (retaking a held one renews it). 0 asks for a new lease of the
	// decider's choosing, which Decision.Lease gives: each check naming none
	// holds its own until released or its TTL ends.
	Lease int64
	// Peek asks without consuming whether a request of Cost would be
	// admitted now: each rule is evaluated at a cost of 0 and answers with
	// its remaining and reset as they stand, allowed when its remaining
	// covers Cost. A rule that would reject gives its reset as the
	// retry-after, the latest time it can take to admit.
	Peek bool
	// Limit, when set, decides the request by this limit alone, in place
	// of its tier's rules and overrides (Envoy's per-descriptor limit
	// override): counted per the values of all the request's descriptors,
	// failing open.
	Limit *RequestLimit
	// Replaced names rules that do not apply to this request: rules the
	// other requests of the same call replace (Rule.Replaces), as
	// Decider.Replacing tells.
	Replaced map[string]bool
}

// RequestLimit is a limit a request brings with it: Requests per Window.
type RequestLimit struct {
	Requests int64
	Window   time.Duration
	// Algorithm counts it: policy.FixedWindow (as Envoy's limits are
	// counted; the zero value means it), SlidingWindow, TokenBucket or GCRA
	// (those two with a burst of Requests), as gubernator's and Unkey's
	// per-request limits choose theirs.
	Algorithm policy.Algorithm
	// Calendar, with the fixed window, counts per calendar day, week,
	// month or year in UTC in place of Window (gubernator's
	// DURATION_IS_GREGORIAN).
	Calendar policy.Calendar
	// OverriddenBy, when set, names a descriptor: the tier's rules that
	// match the request with a condition on it decide the request in place
	// of this limit, they alone (Unkey's overrides: a rule matching
	// namespace=api and identifier=user_* gives those identifiers a limit
	// of the tenant's). Without such a rule, the limit decides.
	OverriddenBy string
}

// RequestLimitAlgorithms are the algorithms a request's own limit may
// name: those with no parameter but a limit and a window.
var RequestLimitAlgorithms = []policy.Algorithm{policy.FixedWindow, policy.SlidingWindow, policy.TokenBucket, policy.GCRA}

// ParseRequestLimitAlgorithm returns the algorithm of a request's own
// limit named name ("": the fixed window), or the field error of a name
// that is not one of RequestLimitAlgorithms.
func ParseRequestLimitAlgorithm(name string) (policy.Algorithm, error) {
	if name == "" {
		return policy.FixedWindow, nil
	}
	a, err := policy.ParseAlgorithm(name)
	if err != nil || !slices.Contains(RequestLimitAlgorithms, a) {
		return policy.AlgorithmUnspecified, badRequestLimitAlgorithm()
	}
	return a, nil
}

func badRequestLimitAlgorithm() error {
	return &policy.Error{Code: policy.CodeInvalid, Message: "invalid check", Fields: []policy.FieldError{{Field: "limit.algorithm",
		Description: "must be fixed_window, sliding_window, token_bucket or gcra"}}}
}

// normal is l with its algorithm named.
func (l RequestLimit) normal() RequestLimit {
	if l.Algorithm == policy.AlgorithmUnspecified {
		l.Algorithm = policy.FixedWindow
	}
	return l
}

// RuleResult is one rule's answer within a decision.
type RuleResult struct {
	Rule *policy.Rule // points into the immutable Compiled
	Key  string       // the counter key the rule counted under
	// Params are the parameters that decided: an override's for this
	// client, else the rule's own (nil says the rule's own too).
	Params *policy.Params
	limit.Result
	// Unenforced is set on a degraded decision's rule that nothing counted
	// (answered open): its Remaining is its capacity, not a count.
	Unenforced bool
}

// InForce returns the parameters that decided (RuleResult.Params): what
// a client is told of its limit and window.
func (r *RuleResult) InForce() *policy.Params {
	if r.Params != nil {
		return r.Params
	}
	return &r.Rule.Params
}

// Decision is the answer to a Request.
type Decision struct {
	Allowed bool
	// Degraded is set when the counters did not decide: they failed (or a
	// breaker was open) and each rule answered by its failure mode, or
	// overload kept the decision from it and the overload policy answered.
	// Degradation says which.
	Degraded    bool
	Degradation Degradation
	// Deciding indexes Rules: the rule that denied, or the most restrictive
	// one when allowed; -1 when no enforced rule applied.
	Deciding int
	Rules    []RuleResult
	Tier     string
	Version  int64 // the config version enforced
	// Cached is set when the deny cache answered: Rules then holds only
	// the rule that denied.
	Cached bool
	// Lease is the lease the request holds on its concurrency rules when
	// admitted (Request.Lease, or the decider's new one), to be ended by
	// Release; 0 when it took none.
	Lease int64
}

// Options configure a Decider.
type Options struct {
	// Counters are the shared counters decided against (Redis). Required.
	Counters Counters
	// Local enforces rules whose failure mode is local while Counters
	// fail; nil answers them as open.
	Local *limit.Engine
	// LocalShare is the share of each limit one decider enforces locally,
	// such as 1/number of deciders (SetLocalShare changes it); 0 means 1.
	LocalShare float64
	// Budget bounds each call to Counters; 0 means unbounded (for counters
	// that cannot block, like the in-process ones).
	Budget time.Duration
	// MaxInFlight bounds the decisions waiting on Counters at once, shared
	// fairly between tenants (see admission); a decision beyond it is
	// answered by Overload without them. 0 means no bound.
	MaxInFlight int
	// Overload answers the decisions that overload keeps from Counters:
	// those MaxInFlight refuses, and those whose budget runs out while
	// queued (limit.ErrOverloaded).
	Overload OverloadPolicy
	// Logger receives one line per overload episode's start and end; nil
	// means slog.Default().
	Logger *slog.Logger
	// DenyCacheSize > 0 remembers that many keys rejected until a known
	// time, answering checks before then without the counters.
	DenyCacheSize int
	// Now dates overrides' expiry, local decisions and the deny cache; nil
	// means time.Now.
	Now func() time.Time
}

// Decider decides requests against compiled configs. It is safe for
// concurrent use.
type Decider struct {
	opts   Options
	denied *denyCache    // nil without a deny cache
	admit  *admission    // nil without MaxInFlight
	share  atomic.Uint64 // the local share's float64 bits (SetLocalShare)
	charge charger       // what overload admitted, for the counters
}

// New returns a Decider on counters with no failure handling, for
// counters that cannot fail (InProcess); now dates overrides' expiry.
func New(counters Counters, now func() time.Time) *Decider {
	return NewDecider(Options{Counters: counters, Now: now})
}

// NewDecider returns a Decider configured by o.
func NewDecider(o Options) *Decider {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LocalShare <= 0 || o.LocalShare > 1 {
		o.LocalShare = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	d := &Decider{opts: o, charge: charger{counters: o.Counters}}
	d.SetLocalShare(o.LocalShare)
	if o.MaxInFlight > 0 {
		d.admit = newAdmission(o.MaxInFlight, o.Logger, o.Now)
	}
	if o.DenyCacheSize > 0 {
		d.denied = newDenyCache(o.DenyCacheSize)
	}
	return d
}

// SetLocalShare sets the share of each limit this decider enforces with
// the in-process engine while the counters cannot decide (Options.
// LocalShare): 1/n when n deciders share the counters, so that together
// they admit a client about its limit, not n times it. A share outside
// (0, 1] means 1. Safe to call while deciding.
func (d *Decider) SetLocalShare(share float64) {
	if share <= 0 || share > 1 {
		share = 1
	}
	d.share.Store(math.Float64bits(share))
}

// LocalShare returns the share of each limit this decider enforces alone
// (SetLocalShare).
func (d *Decider) LocalShare() float64 { return math.Float64frombits(d.share.Load()) }

// BreakerState returns the counters' breaker state: "closed", "half-open"
// or "open" (Counters.Breaker).
func (d *Decider) BreakerState() string { return d.opts.Counters.Breaker() }

// EngineErrors returns how many calls to the counters have failed (Redis
// errors and timeouts), for metrics.
func (d *Decider) EngineErrors() int64 { return d.opts.Counters.Failures() }

// Decide evaluates req against the tenant config c. Invalid input returns a
// policy error with CodeInvalid and field details; a failure of the
// counters is answered by the rules' failure modes (Decision.Degraded).
func (d *Decider) Decide(ctx context.Context, c *Compiled, req Request) (Decision, error) {
	var p prepared
	if done, err := d.prepare(c, req, &p); done || err != nil {
		return p.dec, err
	}
	if p.ask {
		var batch []limit.Call
		if p.sel.one != nil { // no allocation of its own
			batch = p.sel.one.call[:]
		} else {
			batch = make([]limit.Call, 1)
		}
		batch[0] = limit.Call{Reqs: p.sel.reqs, Res: p.res}
		d.opts.Counters.AllowBatch(ctx, d.opts.Budget, batch)
		p.call = batch[0]
		if p.load != nil {
			d.admit.release(p.load)
		}
	}
	return d.finish(ctx, c, &p)
}

// DecideAll decides reqs, each on its own as Decide would, at once: the
// counters hear those they must decide in one batch (one Redis pipeline
// rather than one per decision). errs[i] is reqs[i]'s refusal, if any.
func (d *Decider) DecideAll(ctx context.Context, c *Compiled, reqs []Request) (decs []Decision, errs []error) {
	decs, errs = make([]Decision, len(reqs)), make([]error, len(reqs))
	ps := make([]prepared, len(reqs))
	batch := make([]limit.Call, 0, len(reqs))
	asked := make([]int, 0, len(reqs)) // the index in reqs of each call of batch
	for i := range reqs {
		p := &ps[i]
		done, err := d.prepare(c, reqs[i], p)
		if done || err != nil {
			decs[i], errs[i], p.done = p.dec, err, true
			continue
		}
		if p.ask {
			batch = append(batch, limit.Call{Reqs: p.sel.reqs, Res: p.res})
			asked = append(asked, i)
		}
	}
	if len(batch) > 0 {
		d.opts.Counters.AllowBatch(ctx, d.opts.Budget, batch)
	}
	for k, i := range asked {
		ps[i].call = batch[k]
		if ps[i].load != nil {
			d.admit.release(ps[i].load)
		}
	}
	for i := range ps {
		if !ps[i].done {
			decs[i], errs[i] = d.finish(ctx, c, &ps[i])
		}
	}
	return decs, errs
}

// prepared is a decision up to the counters' answer (see prepare).
type prepared struct {
	req   Request
	sel   selection
	dec   Decision // so far; the answer when prepare says it is done
	res   []limit.Result
	cost  int64 // what each rule is asked to take: 0 for a peek
	lease int64
	cache bool // rejections may be answered from the deny cache
	// ask: the counters are to be asked (not shed by admission, whose
	// share load is then, when set).
	ask  bool
	load *tenantLoad
	call limit.Call // their answer
	done bool       // DecideAll: answered by prepare
}

// prepare readies req's decision in p: its rules, and whether the counters
// are to be asked. It reports done, with the decision in p.dec, when the
// decision needs no counters: no rule applies, a rule blocks, or the deny
// cache answers.
func (d *Decider) prepare(c *Compiled, req Request, p *prepared) (done bool, _ error) {
	if err := refuse(c, req); err != nil {
		return true, err
	}
	p.req = req
	p.cost = max(req.Cost, 1)
	if req.Peek {
		p.cost = 0 // the engines answer a zero cost from the state, writing nothing
	}
	sel, err := d.selectRules(c, req, p.cost)
	if err != nil {
		return true, err
	}
	p.sel = sel
	tier, reqs, picked, params := sel.tier, sel.reqs, sel.picked, sel.params
	if sel.blocked != nil {
		p.dec = Decision{Deciding: 0, Rules: []RuleResult{{Rule: sel.blocked, Result: blocked}}, Tier: tier, Version: c.Version}
		if sel.blocked.Shadow { // every rule in shadow (ShadowAll): reported, not rejected
			p.dec.Allowed, p.dec.Deciding = true, -1
		}
		return true, nil
	}
	p.dec = Decision{Allowed: true, Deciding: -1, Version: c.Version, Tier: tier}
	if len(reqs) == 0 {
		return true, nil
	}
	if sel.blocks {
		for i, r := range picked {
			switch {
			case !r.Block:
			case !r.Shadow: // nothing is counted, nothing asked
				p.dec = Decision{Deciding: 0, Rules: []RuleResult{{Rule: r, Key: reqs[i].Key, Result: blocked}}, Tier: tier, Version: c.Version}
				return true, nil
			default:
				reqs[i].Cost = 0 // what it would reject, without counting
			}
		}
	}
	// A request's own limit can change from one request to the next under
	// the same key, so what a rejection says of the next is not exact.
	p.cache = d.denied != nil && req.Limit == nil
	if p.cache {
		now := d.opts.Now().UnixMicro()
		for i := range reqs {
			if r, ok := d.denied.lookup(c.Version, reqs[i].Key, p.cost, now); ok && !reqs[i].Shadow {
				p.dec = Decision{Deciding: 0, Rules: []RuleResult{{Rule: picked[i], Key: reqs[i].Key, Params: &params[i], Result: r}}, Tier: tier, Version: c.Version, Cached: true}
				return true, nil
			}
		}
	}
	p.lease = req.Lease
	if sel.leases && !req.Peek && p.lease == 0 {
		p.lease = NewLease()
		for i := range reqs {
			reqs[i].Lease = p.lease
		}
	}
	if sel.one != nil {
		p.res, p.dec.Rules = sel.one.res[:], sel.one.rules[:]
	} else {
		p.res, p.dec.Rules = make([]limit.Result, len(reqs)), make([]RuleResult, len(reqs))
	}
	p.ask = true
	if d.admit != nil {
		if p.load, p.ask = d.admit.acquire(c); !p.ask {
			p.dec.Degradation = Shed
		}
	}
	return false, nil
}

// finish completes p's decision with the counters' answer (p.call), or by
// the failure modes or the overload policy when they did not decide.
func (d *Decider) finish(ctx context.Context, c *Compiled, p *prepared) (Decision, error) {
	req, sel, dec, res := p.req, &p.sel, p.dec, p.res
	reqs, picked, params := sel.reqs, sel.picked, sel.params
	allowed, err := p.call.Allowed, p.call.Err
	var unenforced []bool // rules a degraded decision answered open
	switch {
	case err == nil && dec.Degradation == NotDegraded:
	case err != nil && ctx.Err() != nil:
		return Decision{}, ctx.Err()
	case err != nil && !errors.Is(err, limit.ErrOverloaded):
		dec.Degradation = StoreUnavailable
		allowed, unenforced, _ = d.degrade(c, picked, params, reqs, res, failureMode)
	default: // shed, or queued past its budget
		if dec.Degradation == NotDegraded {
			dec.Degradation = QueuedPastBudget
			if p.load != nil {
				d.admit.queuedPastBudget(p.load)
			}
		}
		var local []limit.Request
		allowed, unenforced, local = d.degrade(c, picked, params, reqs, res, d.opts.Overload.modeUnder)
		if allowed && !req.Peek && len(local) > 0 {
			d.charge.add(local, d.opts.Now().UnixMicro()) // Redis is well: it learns what was admitted
		}
	}
	dec.Degraded = dec.Degradation != NotDegraded
	if req.Peek {
		allowed = peeked(reqs, res, max(req.Cost, 1))
	}
	if sel.blocks {
		for i, r := range picked {
			if r.Block {
				res[i] = blocked
			}
		}
	}
	dec.Allowed = allowed
	dec.Deciding = limit.Deciding(reqs, res, allowed)
	if allowed && sel.leases && !req.Peek {
		dec.Lease = p.lease
	}
	if p.cache && !allowed && !dec.Degraded && !req.Peek {
		now := d.opts.Now().UnixMicro()
		for i := range reqs {
			if !res[i].Allowed && !reqs[i].Shadow && cacheable(params[i]) {
				d.denied.remember(c.Version, reqs[i].Key, p.cost, now, res[i])
			}
		}
	}
	for i := range reqs {
		dec.Rules[i] = RuleResult{Rule: picked[i], Key: reqs[i].Key, Params: &params[i], Result: res[i]}
	}
	for i, open := range unenforced {
		dec.Rules[i].Unenforced = open
	}
	return dec, nil
}

// blocked is the answer of a Block rule: rejected, never to be admitted.
var blocked = limit.Result{RetryAfter: limit.Never}

// peeked turns the answers of a peek (rules evaluated at cost 0) into
// those for a request of cost: a rule admits it when its remaining covers
// it, and says retry at its reset otherwise (never, above its capacity).
// It returns whether every enforced rule admits it.
func peeked(reqs []limit.Request, res []limit.Result, cost int64) bool {
	allowed := true
	for i := range res {
		r := &res[i]
		r.AsCost(cost, reqs[i].Limiter.Capacity())
		if !r.Allowed && !reqs[i].Shadow {
			allowed = false
		}
	}
	return allowed
}

// Validate returns the error Decide would refuse req with, without
// deciding it: a caller deciding several requests at once refuses them
// all before any is counted.
func (d *Decider) Validate(c *Compiled, req Request) error {
	if err := refuse(c, req); err != nil {
		return err
	}
	var ovBuf [4]*compiledOverride
	_, _, err := c.tierOf(req.Tier, c.overrides(req.Descriptors, d.opts.Now(), ovBuf[:0]))
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
	// leases is set when a rule picked is a concurrency rule.
	leases bool
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
	ovs := c.overrides(req.Descriptors, d.opts.Now(), ovBuf[:0])
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
		sel.reqs = append(sel.reqs, limit.Request{Key: string(key), Limiter: lim, Cost: cost, Lease: req.Lease, Shadow: r.Shadow, Sync: r.Sync})
		sel.picked = append(sel.picked, rule)
		sel.params = append(sel.params, p)
		sel.blocks = sel.blocks || rule.Block
		sel.leases = sel.leases || p.Algorithm == policy.Concurrency
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

// Reset resets the counters of the rules req applies to (blocking rules,
// which count nothing, aside) on the counters and the in-process fallback,
// and forgets this decider's cached rejections of them; the next request
// of each meets a fresh limiter. Other deciders forget theirs when told
// (Forget). It returns the rules reset; when the counters fail, an error,
// after which they may or may not have been reset.
func (d *Decider) Reset(ctx context.Context, c *Compiled, req Request) ([]*policy.Rule, error) {
	if err := refuse(c, req); err != nil {
		return nil, err
	}
	sel, err := d.selectRules(c, req, 1) // a request's own limit: its counter
	if err != nil {
		return nil, err
	}
	reqs, picked := sel.reqs[:0], sel.picked[:0]
	for i, r := range sel.picked {
		if !r.Block {
			reqs, picked = append(reqs, sel.reqs[i]), append(picked, r)
		}
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	ctx, cancel := d.budgeted(ctx)
	defer cancel()
	err = d.opts.Counters.Reset(ctx, reqs)
	if d.opts.Local != nil {
		for _, r := range reqs {
			d.opts.Local.Reset(r.Key, r.Limiter)
		}
	}
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Key
	}
	d.Forget(keys)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", policy.Errorf(policy.CodeUnavailable, "the counters could not be reset; retry"), err)
	}
	return picked, nil
}

// Forget drops this decider's cached rejections of keys: their counters
// were reset, here or by another decider.
func (d *Decider) Forget(keys []string) {
	if d.denied == nil {
		return
	}
	for _, k := range keys {
		d.denied.forget(k)
	}
}

// Now is the decider's clock: the time its answers' resets count from.
func (d *Decider) Now() time.Time { return d.opts.Now() }

// NewLease returns a new lease id: random, non-zero, below 2^53 (Lua
// numbers are exact below it).
func NewLease() int64 { return 1 + rand.Int64N(1<<53-1) }

// Release ends req's lease (req.Lease) on each concurrency rule the request
// matches, on the counters and on the in-process fallback (a lease may
// have been taken there while the counters failed). Other rules are
// untouched. Releasing a lease that is not held does nothing. While the
// counters' breaker is open, they are not asked: the leases end at their
// TTL.
func (d *Decider) Release(ctx context.Context, c *Compiled, req Request) error {
	return d.release(ctx, c, req, false)
}

// ReleaseHeld ends the lease dec, the decision of req, holds (dec.Lease)
// where it was taken: on the in-process fallback alone when the counters
// had failed (dec.Degraded), else as Release does.
func (d *Decider) ReleaseHeld(ctx context.Context, c *Compiled, req Request, dec Decision) error {
	if dec.Lease == 0 {
		return nil
	}
	req.Lease = dec.Lease
	return d.release(ctx, c, req, dec.Degraded)
}

// Renew extends the lease dec, the decision of req, holds on req's
// concurrency rules to a full TTL from now, as retaking it does, and
// touches no other rule: for a request that lasts longer than a lease
// (a websocket through the proxy). A lease that ended meanwhile is taken
// again when its rule has room; false when it had none. A decision the
// counters failed has nothing to renew there (its leases live on this
// decider, or nowhere).
func (d *Decider) Renew(ctx context.Context, c *Compiled, req Request, dec Decision) (bool, error) {
	if dec.Lease == 0 || dec.Degraded {
		return true, nil
	}
	req.Lease = dec.Lease
	leases, err := d.leasesOf(c, req)
	if err != nil || len(leases) == 0 {
		return err == nil, err
	}
	batch := []limit.Call{{Reqs: leases, Res: make([]limit.Result, len(leases))}}
	d.opts.Counters.AllowBatch(ctx, d.opts.Budget, batch)
	if batch[0].Err != nil {
		return false, errNotRenewed
	}
	return batch[0].Allowed, nil
}

// errNotRenewed answers a renewal the counters did not make.
var errNotRenewed = &policy.Error{Code: policy.CodeUnavailable, Message: "the lease could not be renewed now; it ends at its TTL"}

// leasesOf returns the counter requests of req's concurrency rules.
func (d *Decider) leasesOf(c *Compiled, req Request) ([]limit.Request, error) {
	if err := req.Descriptors.Validate(); err != nil {
		return nil, err
	}
	sel, err := d.selectRules(c, req, 1)
	if err != nil {
		return nil, err
	}
	var leases []limit.Request
	for i, r := range sel.reqs {
		if sel.params[i].Algorithm == policy.Concurrency {
			leases = append(leases, r)
		}
	}
	return leases, nil
}

// release is Release, asking the counters unless localOnly.
func (d *Decider) release(ctx context.Context, c *Compiled, req Request, localOnly bool) error {
	leases, err := d.leasesOf(c, req)
	if err != nil || len(leases) == 0 {
		return err
	}
	if d.opts.Local != nil {
		now := d.opts.Now().UnixMicro()
		for _, r := range leases {
			d.opts.Local.Release(r.Key, r.Limiter, now, r.Lease)
		}
	}
	if localOnly {
		return nil
	}
	ctx, cancel := d.budgeted(ctx)
	defer cancel()
	if err := d.opts.Counters.Release(ctx, leases); err != nil {
		return errNotReleased
	}
	return nil
}

// errNotReleased answers a release the counters did not make.
var errNotReleased = &policy.Error{Code: policy.CodeUnavailable, Message: "the lease could not be released now; it ends at its TTL"}

// budgeted bounds ctx by the per-call time budget, when there is one.
func (d *Decider) budgeted(ctx context.Context) (context.Context, context.CancelFunc) {
	if d.opts.Budget <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d.opts.Budget)
}

// degrade answers each rule by the failure mode modeOf gives it (its own,
// after the counters failed; the overload policy's, under overload) and
// returns whether the decision is admitted, and which rules were answered
// open (nil when none): open rules admit, closed ones reject (retry in a
// second), local ones are enforced by the in-process engine at LocalShare
// of their limit, and only when no closed rule rejects, so that a rejected
// decision consumes nothing there either. Without an in-process engine,
// local rules answer open. It also returns the requests the in-process
// engine counted, with the rules' own keys and limiters.
func (d *Decider) degrade(c *Compiled, picked []*policy.Rule, params []policy.Params, reqs []limit.Request, res []limit.Result,
	modeOf func(*policy.Rule) policy.FailureMode) (bool, []bool, []limit.Request) {
	admitted := true
	var local []limit.Request
	var at []int
	var open []bool
	for i, r := range picked {
		capacity := reqs[i].Limiter.Capacity()
		switch mode := modeOf(r); {
		case mode == policy.FailClosed:
			res[i] = limit.Result{Limit: capacity, RetryAfter: time.Second}
			if !r.Shadow {
				admitted = false
			}
		case mode == policy.FailLocal && d.opts.Local != nil:
			l := c.localLimiter(r, params[i], d.LocalShare())
			local = append(local, limit.Request{Key: reqs[i].Key, Limiter: l, Cost: reqs[i].Cost, Lease: reqs[i].Lease, Shadow: r.Shadow})
			at = append(at, i)
		default: // open, or local without a local engine
			res[i] = limit.Result{Allowed: true, Limit: capacity, Remaining: capacity}
			if open == nil {
				open = make([]bool, len(picked))
			}
			open[i] = true
		}
	}
	if len(local) == 0 {
		return admitted, open, nil
	}
	if !admitted {
		for k := range local {
			local[k].Cost = 0 // answer without consuming
		}
	}
	out := make([]limit.Result, len(local))
	if !d.opts.Local.AllowAll(local, d.opts.Now().UnixMicro(), out) {
		admitted = false
	}
	counted := make([]limit.Request, len(at))
	for k, i := range at {
		res[i] = out[k]
		counted[k] = reqs[i]
	}
	return admitted, open, counted
}

// failureMode is r's own failure mode.
func failureMode(r *policy.Rule) policy.FailureMode { return r.FailureMode }

// Crowded reports whether a decision of c's tenant would be shed now: the
// decider has MaxInFlight decisions on the counters and the tenant its
// fair share of them. Callers refuse such a call at the door, before its
// body is read (decision.Service.Door), so that a flood beyond its share
// costs the decider little; the refusal counts as shed (Loads).
func (d *Decider) Crowded(c *Compiled) bool {
	return d.admit != nil && d.admit.crowded(c)
}

// Full reports whether the decider has MaxInFlight decisions on the
// counters: without it no tenant is Crowded, and a caller can skip
// finding out whose call it has.
func (d *Decider) Full() bool { return d.admit != nil && d.admit.full() }

// Charges returns how many of the overload policy's admissions the
// counters took (Counters.Charge), and how many were dropped unsent (more
// than the charger keeps waiting while the counters failed).
func (d *Decider) Charges() (sent, dropped int64) {
	return d.charge.sent.Load(), d.charge.dropped.Load()
}

// Loads returns each tenant's share of the decisions on the counters: in
// flight now, and shed or queued past their budget since start (nil
// without Options.MaxInFlight).
func (d *Decider) Loads() []TenantLoad {
	if d.admit == nil {
		return nil
	}
	return d.admit.loads()
}
