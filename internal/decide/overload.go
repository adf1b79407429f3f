package decide

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/policy"
)

// Degradation says why a decision was not made by the shared store (Redis).
// The zero value, NotDegraded, is a decision the store made (or that
// needed none).
type Degradation uint8

const (
	NotDegraded Degradation = iota
	// StoreUnavailable: the store failed, or its breaker was open; each
	// rule answered by its failure mode.
	StoreUnavailable
	// Shed: the decider had its fill of decisions waiting on the store and
	// the tenant its share of them (see Options.MaxInFlight); the overload
	// policy answered.
	Shed
	// QueuedPastBudget: the decision waited in the decider (for a pipeline,
	// a connection, a CPU) until its budget ran out before it could be sent
	// to the store; the overload policy answered.
	QueuedPastBudget
)

// Reason is the degradation as answers name it: "" (not degraded),
// "store_unavailable" or "overload".
func (g Degradation) Reason() string {
	switch g {
	case StoreUnavailable:
		return "store_unavailable"
	case Shed, QueuedPastBudget:
		return "overload"
	}
	return ""
}

// Cause is the overload's cause as metrics name it: "shed" or "queued";
// "" for other degradations.
func (g Degradation) Cause() string {
	switch g {
	case Shed:
		return "shed"
	case QueuedPastBudget:
		return "queued"
	}
	return ""
}

// OverloadPolicy says how a decision that overload kept from the store is
// answered. The zero value is OverloadLocal. Whatever the policy, a rule is
// never answered more loosely than its own failure mode would answer it:
// a closed rule stays closed under overload, and an open rule is enforced
// locally (see modeUnder).
type OverloadPolicy uint8

const (
	// OverloadLocal enforces every rule of the decision with the in-process
	// engine at the local share of its limit, as the local failure mode
	// does, but a closed rule rejects; without an in-process engine, each
	// rule's failure mode answers.
	OverloadLocal OverloadPolicy = iota
	// OverloadFailureMode answers each rule by its failure mode, as when
	// the store fails, except that an open rule is enforced locally.
	OverloadFailureMode
	// OverloadReject rejects the decision (retry after a second); shadow
	// rules only report.
	OverloadReject
)

var overloadPolicyNames = [...]string{"local", "failure_mode", "reject"}

func (p OverloadPolicy) String() string {
	if int(p) < len(overloadPolicyNames) {
		return overloadPolicyNames[p]
	}
	return "overload_policy(?)"
}

// ParseOverloadPolicy returns the policy named s: local, failure_mode or
// reject.
func ParseOverloadPolicy(s string) (OverloadPolicy, error) {
	for i, n := range overloadPolicyNames {
		if n == s {
			return OverloadPolicy(i), nil
		}
	}
	return OverloadLocal, policy.Errorf(policy.CodeInvalid, "unknown overload policy %q: want local, failure_mode or reject", s)
}

// modeUnder returns, for overload policy p, the failure mode that answers
// rule r: the stricter of the policy's and the rule's own, an open rule
// counting as local. Overload is the decider's own trouble, never a
// reason to count less than the rule asks: the store is well.
func (p OverloadPolicy) modeUnder(r *policy.Rule) policy.FailureMode {
	if p == OverloadReject || r.FailureMode == policy.FailClosed {
		return policy.FailClosed
	}
	return policy.FailLocal
}

// DefaultMaxInFlight is the deciders' bound on decisions waiting on Redis
// at once (Options.MaxInFlight): with pipelines of up to 128, a few
// pipelines' worth, so that an admitted decision waits milliseconds, not
// its budget, while one Redis still serves over 100,000 decisions a second
// through them.
const DefaultMaxInFlight = 512

// TenantLoad is one tenant's share of a decider's work on the store.
type TenantLoad struct {
	Tenant   string // the tenant's slug
	InFlight int64  // decisions waiting on the store now
	Shed     int64  // decisions refused admission since start (Shed)
	Queued   int64  // decisions whose budget ran out queued since start (QueuedPastBudget)
}

// tenantLoad counts one tenant's decisions on the store.
type tenantLoad struct {
	slug                   atomic.Pointer[string]
	inFlight, shed, queued atomic.Int64
}

// admission bounds the decisions waiting on the store and shares them
// fairly between tenants: each tenant may always have its fair share
// (max/active tenants, at least one) in flight, and more only while the
// decider as a whole has fewer than max. A tenant that floods thus takes
// what the others leave idle, and once the decider is full it is refused
// beyond its share while the others go on within theirs. In flight are at
// most max plus the tenants' unused shares: under 2×max.
//
// Per-tenant caps lending idle capacity were chosen over a weighted fair
// queue: they cost two atomic additions per decision on the hot path and
// no lock, queue or goroutine, and a tenant below its share never waits
// behind another's backlog in the decider, which is what fairness asks.
type admission struct {
	max     int64
	total   atomic.Int64
	active  atomic.Int64 // tenants with decisions in flight
	tenants sync.Map     // tenant id → *tenantLoad

	logger *slog.Logger
	now    func() time.Time
	// overloaded is set from a decision shed or queued past its budget
	// until none has been for overloadQuiet; since counts them meanwhile.
	overloaded atomic.Bool
	lastSeen   atomic.Int64 // unix ns of the last such decision
	episode    atomic.Int64 // such decisions in this episode
	lastOnset  atomic.Int64 // unix ns of the last onset logged
}

// overloadQuiet is how long without overload ends an episode; onsets are
// logged at most once per overloadQuiet too.
const overloadQuiet = 5 * time.Second

func newAdmission(max int, logger *slog.Logger, now func() time.Time) *admission {
	return &admission{max: int64(max), logger: logger, now: now}
}

// tenant returns the load of c's tenant.
func (a *admission) tenant(c *Compiled) *tenantLoad {
	if v, ok := a.tenants.Load(c.Tenant.ID); ok {
		t := v.(*tenantLoad)
		if p := t.slug.Load(); *p != c.Tenant.Slug { // renamed
			t.slug.Store(&c.Tenant.Slug)
		}
		return t
	}
	t := &tenantLoad{}
	t.slug.Store(&c.Tenant.Slug)
	v, _ := a.tenants.LoadOrStore(c.Tenant.ID, t)
	return v.(*tenantLoad)
}

// acquire admits one decision of c's tenant to the store, or refuses it
// (false) when the decider is full and the tenant has its share in
// flight. An admitted decision is released once answered.
func (a *admission) acquire(c *Compiled) (*tenantLoad, bool) {
	t := a.tenant(c)
	mine := t.inFlight.Add(1)
	if mine == 1 {
		a.active.Add(1)
	}
	if total := a.total.Add(1); total > a.max && mine > a.share() {
		a.release(t)
		t.shed.Add(1)
		a.overload(t)
		return t, false
	}
	if a.overloaded.Load() {
		a.maybeEnd()
	}
	return t, true
}

// share is each tenant's fair share of the bound: max over the tenants
// with decisions in flight, at least one.
func (a *admission) share() int64 { return max(1, a.max/max(1, a.active.Load())) }

// full reports whether the decider has its bound in flight.
func (a *admission) full() bool { return a.total.Load() >= a.max }

// crowded reports whether the decider is full and c's tenant has its
// share in flight: a decision of the tenant now would be shed. It counts
// such a refusal as shed, as acquire would.
func (a *admission) crowded(c *Compiled) bool {
	if !a.full() {
		return false
	}
	t := a.tenant(c)
	if t.inFlight.Load() < a.share() {
		return false
	}
	t.shed.Add(1)
	a.overload(t)
	return true
}

// release ends an admitted decision of t.
func (a *admission) release(t *tenantLoad) {
	if t.inFlight.Add(-1) == 0 {
		a.active.Add(-1)
	}
	a.total.Add(-1)
}

// queuedPastBudget counts a decision of t that overload kept from the
// store although admitted.
func (a *admission) queuedPastBudget(t *tenantLoad) {
	t.queued.Add(1)
	a.overload(t)
}

// overload notes one decision of t that overload kept from the store,
// logging the onset of an episode (at most once per overloadQuiet).
func (a *admission) overload(t *tenantLoad) {
	now := a.now().UnixNano()
	a.lastSeen.Store(now)
	a.episode.Add(1)
	if a.overloaded.Load() || !a.overloaded.CompareAndSwap(false, true) {
		return
	}
	if last := a.lastOnset.Load(); now-last >= int64(overloadQuiet) && a.lastOnset.CompareAndSwap(last, now) {
		a.logger.LogAttrs(context.Background(), slog.LevelWarn, "decider overloaded: decisions kept from the store are answered by the overload policy",
			slog.String("tenant", *t.slug.Load()), slog.Int64("in_flight", a.total.Load()), slog.Int64("max_in_flight", a.max))
	}
}

// maybeEnd ends the overload episode once none has been seen for
// overloadQuiet, logging how many decisions it kept from the store.
func (a *admission) maybeEnd() {
	now := a.now().UnixNano()
	if now-a.lastSeen.Load() < int64(overloadQuiet) || !a.overloaded.CompareAndSwap(true, false) {
		return
	}
	a.logger.LogAttrs(context.Background(), slog.LevelInfo, "decider overload ended",
		slog.Int64("decisions_kept_from_store", a.episode.Swap(0)))
}

// loads returns every tenant's load.
func (a *admission) loads() []TenantLoad {
	var out []TenantLoad
	a.tenants.Range(func(_, v any) bool {
		t := v.(*tenantLoad)
		out = append(out, TenantLoad{Tenant: *t.slug.Load(), InFlight: t.inFlight.Load(), Shed: t.shed.Load(), Queued: t.queued.Load()})
		return true
	})
	return out
}
