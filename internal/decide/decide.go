package decide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/adaptive"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
)

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
	// Global is what this decider knows of the other regions' counts of
	// global rules (policy.ScopeGlobal); nil holds each rule in this
	// region alone.
	Global Global
	// Adaptive keeps the fleet's limits of adaptive concurrency rules
	// (package fleet); nil holds each at its ceiling.
	Adaptive Adaptive
}

// Backend names the backend an adaptive rule guards: the tenant's slug,
// the rule, and the descriptors of a request to it (the rule's key-by
// values name the backend).
type Backend struct {
	Tenant      string
	Rule        *policy.Rule
	Descriptors policy.Descriptors
}

// Adaptive is a decider's part in the fleet's adaptive concurrency limits
// (package fleet's Fleet).
type Adaptive interface {
	// Params is p, an adaptive rule's parameters, with the fleet's limit
	// of key as its limit, and their limiter; of names the backend, for
	// its metrics.
	Params(key string, of Backend, p policy.Params) (policy.Params, *limit.Limiter)
	// Decided notes what the counters answered a decision on key.
	Decided(key string, r limit.Result)
	// Released takes the sample of a lease released on key.
	Released(key string, latency time.Duration, o adaptive.Outcome)
}

// Global is a decider's view of the other regions' counts of global rules
// (package regions' Table).
type Global interface {
	// Spent is what the other regions spent of key's limit in the window
	// starting at start (µs), plus weight times what they spent in the
	// window before, starting at prev.
	Spent(key string, start, prev int64, weight float64, limit int64, now time.Time) int64
	// Admitted notes what this decider admitted on key in the window
	// [start, end), for the other regions.
	Admitted(key string, start, end, cost int64)
	// AdmittedMeter notes what this decider admitted at µs on key, a meter
	// of interval µs a unit, for the other regions to charge.
	AdmittedMeter(key string, interval float64, cost, at int64)
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
	if sel.global && d.opts.Global != nil {
		now := d.opts.Now()
		for i, r := range picked {
			if r.Scope == policy.ScopeGlobal {
				if start, _, prev, weight, ok := reqs[i].Limiter.Windows(now.UnixMicro()); ok {
					reqs[i].Spent = d.opts.Global.Spent(reqs[i].Key, start, prev, weight, params[i].Limit, now)
				}
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
	if sel.global && d.opts.Global != nil && allowed && !dec.Degraded && !req.Peek {
		d.admittedGlobal(picked, reqs, res)
	}
	if allowed && sel.leases && !req.Peek {
		dec.Lease = p.lease
	}
	if sel.adaptive && d.opts.Adaptive != nil && !dec.Degraded && !req.Peek {
		for i := range reqs {
			if params[i].Algorithm == policy.AdaptiveConcurrency {
				d.opts.Adaptive.Decided(reqs[i].Key, res[i])
			}
		}
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

// admittedGlobal tells Options.Global what an admitted decision took of
// its global rules.
func (d *Decider) admittedGlobal(picked []*policy.Rule, reqs []limit.Request, res []limit.Result) {
	now := d.opts.Now().UnixMicro()
	for i, r := range picked {
		if r.Scope != policy.ScopeGlobal || reqs[i].Cost <= 0 || !res[i].Allowed {
			continue
		}
		if start, end, _, _, ok := reqs[i].Limiter.Windows(now); ok {
			d.opts.Global.Admitted(reqs[i].Key, start, end, reqs[i].Cost)
		} else if interval, ok := reqs[i].Limiter.Meter(); ok {
			d.opts.Global.AdmittedMeter(reqs[i].Key, interval, reqs[i].Cost, now)
		}
	}
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
