package decide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

// Engine answers a decision's rule requests all-or-nothing (see
// limit.Engine.AllowAll): the in-process engine, or Redis.
type Engine interface {
	AllowAll(ctx context.Context, reqs []limit.Request, res []limit.Result) (bool, error)
}

// BudgetEngine is an Engine that applies the per-call time budget itself,
// to the calls it makes to shared state only: a decision it answers from
// memory (redisengine's local counting) then costs no deadline timer. The
// decider hands such an engine the budget instead of a deadline.
type BudgetEngine interface {
	AllowAllWithin(ctx context.Context, budget time.Duration, reqs []limit.Request, res []limit.Result) (bool, error)
}

// Resetter is an Engine whose counters can be reset: the next request of
// each of reqs' keys meets a fresh limiter.
type Resetter interface {
	Reset(ctx context.Context, reqs []limit.Request) error
}

// LocalEngine runs decisions on the in-process engine, with the time from Now.
type LocalEngine struct {
	Engine *limit.Engine
	Now    func() time.Time
}

// Release implements Releaser.
func (l LocalEngine) Release(_ context.Context, reqs []limit.Request) error {
	now := l.Now().UnixMicro()
	for _, r := range reqs {
		l.Engine.Release(r.Key, r.Limiter, now, r.Lease)
	}
	return nil
}

// Reset implements Resetter; it never fails.
func (l LocalEngine) Reset(_ context.Context, reqs []limit.Request) error {
	for _, r := range reqs {
		l.Engine.Reset(r.Key, r.Limiter)
	}
	return nil
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
	Rule *policy.Rule // points into the immutable Config
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
	// Degraded is set when the engine did not decide: it failed (or its
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
	// Engine decides against the shared counters (Redis). Required.
	Engine Engine
	// Local enforces rules whose failure mode is local while Engine fails;
	// nil answers them as open.
	Local *limit.Engine
	// LocalShare is the share of each limit one decider enforces locally,
	// such as 1/number of deciders; 0 means 1.
	LocalShare float64
	// Budget bounds each engine call; 0 means unbounded (for an engine that
	// cannot block, like the in-process one).
	Budget time.Duration
	// BreakerFailures consecutive engine failures open the breaker, which
	// then answers by failure modes without calling the engine for
	// BreakerCooldown before letting one call probe. 0 disables it. An
	// engine that is a Sharder has a breaker per shard.
	BreakerFailures uint32
	BreakerCooldown time.Duration
	// MaxInFlight bounds the decisions waiting on Engine at once, shared
	// fairly between tenants (see admission); a decision beyond it is
	// answered by Overload without the engine. 0 means no bound.
	MaxInFlight int
	// Overload answers the decisions that overload keeps from Engine: those
	// MaxInFlight refuses, and those whose budget runs out while queued in
	// the engine (limit.ErrOverloaded). Neither counts against a breaker.
	Overload OverloadPolicy
	// Logger receives one line per breaker transition and per overload
	// episode's start and end; nil means slog.Default().
	Logger *slog.Logger
	// DenyCacheSize > 0 remembers that many keys rejected until a known
	// time, answering checks before then without the engine.
	DenyCacheSize int
	// Now dates overrides' expiry, local decisions and the deny cache; nil
	// means time.Now.
	Now func() time.Time
}

// Decider decides requests against compiled configs. It is safe for
// concurrent use.
type Decider struct {
	opts    Options
	breaker *gobreaker.CircuitBreaker[bool] // the engine's, or of its shard ""
	shards  sync.Map                        // a Sharder's other shards' breakers, by name
	// engineErrors counts failed engine calls (errors and timeouts; calls
	// the open breaker refused are not made and not counted).
	engineErrors atomic.Int64
	denied       *denyCache // nil without a deny cache
	admit        *admission // nil without MaxInFlight
}

// New returns a Decider on engine with no failure handling, for engines
// that cannot fail (the in-process one); now dates overrides' expiry.
func New(engine Engine, now func() time.Time) *Decider {
	return NewDecider(Options{Engine: engine, Now: now})
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
	d := &Decider{opts: o}
	if o.MaxInFlight > 0 {
		d.admit = newAdmission(o.MaxInFlight, o.Logger, o.Now)
	}
	if o.DenyCacheSize > 0 {
		d.denied = newDenyCache(o.DenyCacheSize)
	}
	if o.BreakerFailures > 0 {
		d.breaker = d.newBreaker("engine")
	}
	return d
}

// newBreaker returns a breaker of the options' settings (see Options).
func (d *Decider) newBreaker(name string) *gobreaker.CircuitBreaker[bool] {
	return gobreaker.NewCircuitBreaker[bool](gobreaker.Settings{
		Name:        name,
		Timeout:     d.opts.BreakerCooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= d.opts.BreakerFailures },
		// A caller hanging up says nothing about the engine, nor another
		// shard's failure about this one's, nor the decider's own backlog.
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) || errors.Is(err, errElsewhere) || errors.Is(err, limit.ErrOverloaded)
		},
		OnStateChange: func(name string, from, to gobreaker.State) {
			level := slog.LevelWarn
			if to == gobreaker.StateClosed {
				level = slog.LevelInfo
			}
			d.opts.Logger.LogAttrs(context.Background(), level, "breaker "+to.String(),
				slog.String("breaker", name), slog.String("from", from.String()))
		},
	})
}

// Sharder is an Engine whose decisions go to one or more of several stores
// that fail apart (a Redis Cluster's masters): Shards names the store of
// reqs' first key, and the others that the rest go to, each once ("" and
// none when the engine cannot tell). Each store has a breaker of its own,
// so that one master down sends the decisions it holds to their failure
// modes, not those of the others. A decision spanning stores passes each
// one's breaker (any open: the failure modes); its failure counts against
// the store its error names, by a method FailedShard() string, and
// against all of them when it names none of theirs.
type Sharder interface {
	Shards(ctx context.Context, reqs []limit.Request) (first string, others []string)
}

// breakerNamed returns the breaker of a Sharder's shard name ("": the
// engine's).
func (d *Decider) breakerNamed(name string) *gobreaker.CircuitBreaker[bool] {
	if name == "" {
		return d.breaker
	}
	if b, ok := d.shards.Load(name); ok {
		return b.(*gobreaker.CircuitBreaker[bool])
	}
	b, _ := d.shards.LoadOrStore(name, d.newBreaker("engine "+name))
	return b.(*gobreaker.CircuitBreaker[bool])
}

// errElsewhere is what a shard's breaker is told of a decision spanning
// shards that failed on another, or that another's breaker refused: not a
// failure of its own, nor a success (excluded, see newBreaker).
var errElsewhere = errors.New("decide: failed on another shard")

// acrossShards runs do, a decision spanning the shards names, through each
// one's breaker (see Sharder), returning do's answer, or the refusal of
// the first breaker that refused it.
func (d *Decider) acrossShards(names []string, do func() (bool, error)) (bool, error) {
	var (
		ran, allowed     bool
		failure, refused error
		blamed           string // the shard failure names, "" for all
	)
	run := func() error {
		ran = true
		allowed, failure = do()
		var on interface{ FailedShard() string }
		if errors.As(failure, &on) && slices.Contains(names, on.FailedShard()) {
			blamed = on.FailedShard()
		}
		return failure
	}
	for _, name := range slices.Backward(names) {
		b, inner := d.breakerNamed(name), run
		run = func() error {
			_, err := b.Execute(func() (bool, error) {
				err := inner()
				if err == nil || ran && (blamed == "" || blamed == name) {
					return false, err
				}
				return false, errElsewhere
			})
			if err != nil && !ran && refused == nil {
				refused = err // this breaker's refusal (a deeper one's is set first)
			}
			return err
		}
	}
	_ = run()
	if !ran {
		return false, refused
	}
	return allowed, failure
}

// Gatherer is an Engine that can send decisions made at once together
// (redisengine's batching does): Gather returns the context of n such
// decisions, and Skip tells it that one of them will not reach the engine.
type Gatherer interface {
	Gather(ctx context.Context, n int) context.Context
	Skip(ctx context.Context)
}

// Gather returns ctx for n decisions made at once, to be decided with it at
// the same time: an engine that batches sends them together. ctx is
// returned as is when the engine cannot.
func (d *Decider) Gather(ctx context.Context, n int) context.Context {
	if g, ok := d.opts.Engine.(Gatherer); ok {
		return g.Gather(ctx, n)
	}
	return ctx
}

// BreakerState returns "closed", "half-open" or "open" ("closed" without a
// breaker): with a breaker per shard, the worst of them — "open" when
// any shard's is.
func (d *Decider) BreakerState() string {
	if d.breaker == nil {
		return "closed"
	}
	worst := d.breaker.State()
	d.shards.Range(func(_, b any) bool {
		st := b.(*gobreaker.CircuitBreaker[bool]).State()
		if st == gobreaker.StateOpen || (st == gobreaker.StateHalfOpen && worst == gobreaker.StateClosed) {
			worst = st
		}
		return worst != gobreaker.StateOpen
	})
	return worst.String()
}

// Decide evaluates req against the tenant config c. Invalid input returns a
// policy error with CodeInvalid and field details; an engine failure is
// returned as is.
func (d *Decider) Decide(ctx context.Context, c *Config, req Request) (Decision, error) {
	dec, engaged, err := d.decide(ctx, c, req)
	if g, ok := d.opts.Engine.(Gatherer); ok && !engaged { // the others of a gathered call need not wait for it
		g.Skip(ctx)
	}
	return dec, err
}

// decide is Decide, also saying whether the engine was called.
func (d *Decider) decide(ctx context.Context, c *Config, req Request) (_ Decision, engaged bool, _ error) {
	if err := refuse(c, req); err != nil {
		return Decision{}, false, err
	}
	cost := max(req.Cost, 1)
	if req.Peek {
		cost = 0 // the engines answer a zero cost from the state, writing nothing
	}
	sel, err := d.selectRules(c, req, cost)
	if err != nil {
		return Decision{}, false, err
	}
	tier, reqs, picked, params := sel.tier, sel.reqs, sel.picked, sel.params
	if sel.blocked != nil {
		dec := Decision{Deciding: 0, Rules: []RuleResult{{Rule: sel.blocked, Result: blocked}}, Tier: tier, Version: c.Version}
		if sel.blocked.Shadow { // every rule in shadow (ShadowAll): reported, not rejected
			dec.Allowed, dec.Deciding = true, -1
		}
		return dec, false, nil
	}
	dec := Decision{Allowed: true, Deciding: -1, Version: c.Version, Tier: tier}
	if len(reqs) == 0 {
		return dec, false, nil
	}
	if sel.blocks {
		for i, r := range picked {
			switch {
			case !r.Block:
			case !r.Shadow: // nothing is counted, nothing asked
				return Decision{Deciding: 0, Rules: []RuleResult{{Rule: r, Key: reqs[i].Key, Result: blocked}}, Tier: tier, Version: c.Version}, false, nil
			default:
				reqs[i].Cost = 0 // what it would reject, without counting
			}
		}
	}
	// A request's own limit can change from one request to the next under
	// the same key, so what a rejection says of the next is not exact.
	cache := d.denied != nil && req.Limit == nil
	if cache {
		now := d.opts.Now().UnixMicro()
		for i := range reqs {
			if r, ok := d.denied.lookup(c.Version, reqs[i].Key, cost, now); ok && !reqs[i].Shadow {
				return Decision{Deciding: 0, Rules: []RuleResult{{Rule: picked[i], Key: reqs[i].Key, Params: &params[i], Result: r}}, Tier: tier, Version: c.Version, Cached: true}, false, nil
			}
		}
	}
	lease := req.Lease
	if sel.leases && !req.Peek && lease == 0 {
		lease = NewLease()
		for i := range reqs {
			reqs[i].Lease = lease
		}
	}
	var res []limit.Result
	if sel.one != nil {
		res, dec.Rules = sel.one.res[:], sel.one.rules[:]
	} else {
		res, dec.Rules = make([]limit.Result, len(reqs)), make([]RuleResult, len(reqs))
	}
	var (
		allowed    bool
		load       *tenantLoad
		unenforced []bool // rules a degraded decision answered open
	)
	if d.admit != nil {
		var admitted bool
		if load, admitted = d.admit.acquire(c); !admitted {
			dec.Degradation = Shed
		}
	}
	if dec.Degradation == NotDegraded {
		allowed, engaged, err = d.call(ctx, reqs, res)
		if load != nil {
			d.admit.release(load)
		}
	}
	switch {
	case err == nil && dec.Degradation == NotDegraded:
	case err != nil && ctx.Err() != nil:
		return Decision{}, engaged, ctx.Err()
	case err != nil && !errors.Is(err, limit.ErrOverloaded):
		dec.Degradation = StoreUnavailable
		allowed, unenforced = d.degrade(c, picked, params, reqs, res, failureMode)
	default: // shed, or queued past its budget
		if dec.Degradation == NotDegraded {
			dec.Degradation = QueuedPastBudget
			if load != nil {
				d.admit.queuedPastBudget(load)
			}
		}
		allowed, unenforced = d.degrade(c, picked, params, reqs, res, d.opts.Overload.modeUnder)
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
		dec.Lease = lease
	}
	if cache && !allowed && !dec.Degraded && !req.Peek {
		now := d.opts.Now().UnixMicro()
		for i := range reqs {
			if !res[i].Allowed && !reqs[i].Shadow && cacheable(params[i]) {
				d.denied.remember(c.Version, reqs[i].Key, cost, now, res[i])
			}
		}
	}
	for i := range reqs {
		dec.Rules[i] = RuleResult{Rule: picked[i], Key: reqs[i].Key, Params: &params[i], Result: res[i]}
	}
	for i, open := range unenforced {
		dec.Rules[i].Unenforced = open
	}
	return dec, engaged, nil
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
func (d *Decider) Validate(c *Config, req Request) error {
	if err := refuse(c, req); err != nil {
		return err
	}
	var ovBuf [4]*compiledOverride
	_, _, err := c.tierOf(req.Tier, c.overrides(req.Descriptors, d.opts.Now(), ovBuf[:0]))
	return err
}

// refuse refuses what no config could decide: invalid descriptors, a
// negative cost, a suspended tenant.
func refuse(c *Config, req Request) error {
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
func (c *Config) tierOf(tier string, ovs []*compiledOverride) (string, []compiledRule, error) {
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
}

// selectRules picks the rules of req's tier (its own, else an override's,
// else the tenant's default) that match its descriptors, with overrides
// applied.
func (d *Decider) selectRules(c *Config, req Request, cost int64) (selection, error) {
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
func (d *Decider) Replacing(c *Config, req Request) []string {
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
// which count nothing, aside) on the engine and the in-process fallback,
// and forgets this decider's cached rejections of them; the next request
// of each meets a fresh limiter. Other deciders forget theirs when told
// (Forget). It returns the rules reset; an engine that cannot reset
// (not a Resetter) or fails returns an error, after which the counters
// may or may not have been reset.
func (d *Decider) Reset(ctx context.Context, c *Config, req Request) ([]*policy.Rule, error) {
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
	rs, ok := d.opts.Engine.(Resetter)
	if !ok {
		return nil, errors.New("decide: the engine cannot reset counters")
	}
	ctx, cancel := d.budgeted(ctx)
	defer cancel()
	err = rs.Reset(ctx, reqs)
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
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			d.engineErrors.Add(1)
		}
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

// Releaser is an Engine that can end concurrency leases.
type Releaser interface {
	Release(ctx context.Context, reqs []limit.Request) error
}

// Release ends req's lease (req.Lease) on each concurrency rule the request
// matches, on the engine and on the in-process fallback (a lease may have
// been taken there while the engine failed). Other rules are untouched.
// Releasing a lease that is not held does nothing. While the engine's
// breaker is open, the engine is not asked: its leases end at their TTL.
func (d *Decider) Release(ctx context.Context, c *Config, req Request) error {
	return d.release(ctx, c, req, false)
}

// ReleaseHeld ends the lease dec, the decision of req, holds (dec.Lease)
// where it was taken: on the in-process fallback alone when the engine
// had failed (dec.Degraded), else as Release does.
func (d *Decider) ReleaseHeld(ctx context.Context, c *Config, req Request, dec Decision) error {
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
// engine failed has nothing to renew there (its leases live on this
// decider, or nowhere).
func (d *Decider) Renew(ctx context.Context, c *Config, req Request, dec Decision) (bool, error) {
	if dec.Lease == 0 || dec.Degraded {
		return true, nil
	}
	req.Lease = dec.Lease
	leases, err := d.leasesOf(c, req)
	if err != nil || len(leases) == 0 {
		return err == nil, err
	}
	allowed, _, err := d.call(ctx, leases, make([]limit.Result, len(leases))) // through the breakers, as decisions go
	if err != nil {
		return false, errNotRenewed
	}
	return allowed, nil
}

// errNotRenewed answers a renewal the engine did not make.
var errNotRenewed = &policy.Error{Code: policy.CodeUnavailable, Message: "the lease could not be renewed now; it ends at its TTL"}

// leasesOf returns the counter requests of req's concurrency rules.
func (d *Decider) leasesOf(c *Config, req Request) ([]limit.Request, error) {
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

// release is Release, asking the engine unless localOnly.
func (d *Decider) release(ctx context.Context, c *Config, req Request, localOnly bool) error {
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
	rel, ok := d.opts.Engine.(Releaser)
	if !ok || localOnly {
		return nil
	}
	if d.breakerOpen(ctx, leases) {
		return errNotReleased
	}
	ctx, cancel := d.budgeted(ctx)
	defer cancel()
	if err := rel.Release(ctx, leases); err != nil {
		if !errors.Is(err, limit.ErrOverloaded) {
			d.engineErrors.Add(1)
		}
		return errNotReleased
	}
	return nil
}

// errNotReleased answers a release the engine did not make.
var errNotReleased = &policy.Error{Code: policy.CodeUnavailable, Message: "the lease could not be released now; it ends at its TTL"}

// breakerOpen reports whether a breaker reqs would pass is open: the
// engine (or a shard of it) is not to be asked now.
func (d *Decider) breakerOpen(ctx context.Context, reqs []limit.Request) bool {
	if d.breaker == nil {
		return false
	}
	names := []string{""}
	if s, ok := d.opts.Engine.(Sharder); ok {
		first, others := s.Shards(ctx, reqs)
		names = append([]string{first}, others...)
	}
	for _, n := range names {
		if d.breakerNamed(n).State() == gobreaker.StateOpen {
			return true
		}
	}
	return false
}

// budgeted bounds ctx by the per-call time budget, when there is one.
func (d *Decider) budgeted(ctx context.Context) (context.Context, context.CancelFunc) {
	if d.opts.Budget <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d.opts.Budget)
}

// EngineErrors returns how many engine calls have failed (Redis errors
// and timeouts), for metrics.
func (d *Decider) EngineErrors() int64 { return d.engineErrors.Load() }

// call asks the engine within the budget, through the breaker.
func (d *Decider) call(ctx context.Context, reqs []limit.Request, res []limit.Result) (allowed, engaged bool, err error) {
	do := func() (bool, error) {
		engaged = true
		ok, err := d.allowAll(ctx, reqs, res)
		if err != nil && !errors.Is(err, limit.ErrOverloaded) {
			d.engineErrors.Add(1)
		}
		return ok, err
	}
	s, sharded := d.opts.Engine.(Sharder)
	switch {
	case d.breaker == nil:
		allowed, err = do()
	case !sharded:
		allowed, err = d.breaker.Execute(do)
	default:
		first, others := s.Shards(ctx, reqs)
		if len(others) == 0 {
			allowed, err = d.breakerNamed(first).Execute(do)
		} else {
			allowed, err = d.acrossShards(append([]string{first}, others...), do)
		}
	}
	return allowed, engaged, err
}

// allowAll asks the engine within the budget.
func (d *Decider) allowAll(ctx context.Context, reqs []limit.Request, res []limit.Result) (bool, error) {
	if be, ok := d.opts.Engine.(BudgetEngine); ok {
		return be.AllowAllWithin(ctx, d.opts.Budget, reqs, res)
	}
	ctx, cancel := d.budgeted(ctx)
	defer cancel()
	return d.opts.Engine.AllowAll(ctx, reqs, res)
}

// degrade answers each rule by the failure mode modeOf gives it (its own,
// after an engine failure; the overload policy's, under overload) and
// returns whether the decision is admitted, and which rules were answered
// open (nil when none): open rules admit, closed ones reject (retry in a
// second), local ones are enforced by the in-process engine at LocalShare
// of their limit, and only when no closed rule rejects, so that a rejected
// decision consumes nothing there either. Without an in-process engine,
// local rules answer open.
func (d *Decider) degrade(c *Config, picked []*policy.Rule, params []policy.Params, reqs []limit.Request, res []limit.Result,
	modeOf func(*policy.Rule) policy.FailureMode) (bool, []bool) {
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
			l := c.localLimiter(r, params[i], d.opts.LocalShare)
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
		return admitted, open
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
	for k, i := range at {
		res[i] = out[k]
	}
	return admitted, open
}

// failureMode is r's own failure mode.
func failureMode(r *policy.Rule) policy.FailureMode { return r.FailureMode }

// Loads returns each tenant's share of the decisions on the engine: in
// flight now, and shed or queued past their budget since start (nil
// without Options.MaxInFlight).
func (d *Decider) Loads() []TenantLoad {
	if d.admit == nil {
		return nil
	}
	return d.admit.loads()
}
