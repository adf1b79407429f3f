package decision

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/decide"
)

// Metrics are the decider's decision metrics. Labels are bounded: tenant
// slugs and fixed outcomes, never client ids. The zero value records
// nothing; build one with NewMetrics.
type Metrics struct {
	decisions *prometheus.CounterVec
	degraded  *prometheus.CounterVec
	overload  *prometheus.CounterVec
	denyHits  *prometheus.CounterVec
	resets    *prometheus.CounterVec
	leases    *prometheus.CounterVec
	rules     *prometheus.CounterVec
	nearLimit *prometheus.CounterVec
	proxied   *prometheus.CounterVec
	upstream  *prometheus.CounterVec
	panics    *prometheus.CounterVec
	latency   prometheus.Histogram
	perRule   bool
	kept      series // of decisions, rules and nearLimit, by what names them
}

// NewMetrics registers the decision metrics on reg, and the breaker state
// of decider (0 closed, 1 half-open, 2 open). Per-rule counts are on;
// PerRule turns them off.
func NewMetrics(reg prometheus.Registerer, decider *decide.Decider) *Metrics {
	m := &Metrics{perRule: true,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_decisions_total",
			Help: "Decisions by tenant and outcome (allowed, rejected, peek, error)."}, []string{"tenant", "outcome"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_failure_mode_decisions_total",
			Help: "Decisions answered by the rules' failure modes because the engine failed or its breaker was open."}, []string{"tenant"}),
		overload: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_overload_decisions_total",
			Help: "Decisions the overload policy answered because the decider could not get them to Redis in their budget, by tenant and cause: shed (the decider was full and the tenant had its share in flight; a call refused at the door counts once), queued (the budget ran out while queued in the decider)."},
			[]string{"tenant", "cause"}),
		denyHits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_deny_cache_hits_total",
			Help: "Rejections answered from the deny cache, without the engine."}, []string{"tenant"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_resets_total",
			Help: "Counter resets asked of this decider, by tenant and outcome (reset, error)."}, []string{"tenant", "outcome"}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_lease_operations_total",
			Help: "Concurrency leases released and renewed by this decider, by tenant, operation (release, renew) and outcome (ok, error)."}, []string{"tenant", "op", "outcome"}),
		rules: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rule_decisions_total",
			Help: "Each rule's answers, by tenant, tier and rule name: allowed, rejected, shadow_rejected (a shadow rule that would have rejected)."},
			[]string{"tenant", "tier", "rule", "outcome"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rule_near_limit_total",
			Help: "Admissions that left a rule less than a fifth of its limit, by tenant, tier and rule name."},
			[]string{"tenant", "tier", "rule"}),
		proxied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_proxy_identities_total",
			Help: "Proxied requests by what named their client: jwt, client_cert, header, cookie or ip (none of the others did)."}, []string{"source"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_proxy_upstream_errors_total",
			Help: "Allowed requests the proxy could not forward, by reason: unreachable (502: refused, reset, broken off), timeout (504: no answer within -upstream-timeout), canceled (the client went away first)."}, []string{"reason"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_panics_total",
			Help: "Requests whose handling panicked (a bug), answered with an internal error instead of ending the decider, by API: http, grpc."}, []string{"api"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_decision_seconds",
			Help: "Time to decide, as the decider sees it.", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14)}),
	}
	states := map[string]float64{"closed": 0, "half-open": 1, "open": 2}
	reg.MustRegister(m.decisions, m.degraded, m.overload, inFlight{decider}, m.denyHits, m.resets, m.leases, m.rules, m.nearLimit, m.proxied, m.upstream, m.panics, m.latency, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_breaker_state",
		Help: "State of the engine's circuit breaker: 0 closed, 1 half-open, 2 open."}, func() float64 { return states[decider.BreakerState()] }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_engine_errors_total",
			Help: "Failed calls to the decision engine (Redis errors and timeouts)."}, func() float64 { return float64(decider.EngineErrors()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_overload_charges_total", ConstLabels: prometheus.Labels{"outcome": "sent"},
			Help: "Admissions of the overload policy charged to Redis afterwards (sent), or dropped unsent while Redis failed (dropped)."}, func() float64 { s, _ := decider.Charges(); return float64(s) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_overload_charges_total", ConstLabels: prometheus.Labels{"outcome": "dropped"},
			Help: "Admissions of the overload policy charged to Redis afterwards (sent), or dropped unsent while Redis failed (dropped)."}, func() float64 { _, d := decider.Charges(); return float64(d) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_local_share",
			Help: "Share of each limit this decider enforces alone while Redis cannot decide: 1/live deciders unless -local-share sets it."}, decider.LocalShare))
	return m
}

// refusedAtDoor counts a call of tenant refused at the door (Door) among
// the shed.
func (m *Metrics) refusedAtDoor(tenant string) {
	if m == nil {
		return
	}
	m.overload.WithLabelValues(tenant, decide.Shed.Cause()).Inc()
}

// observe records one decision of configuration c.
func (m *Metrics) observe(c *decide.Compiled, peek bool, dec decide.Decision, err error, took time.Duration) {
	if m == nil {
		return
	}
	outcome := decisionsAllowed
	switch {
	case err != nil:
		outcome = decisionsError
	case peek: // asked, not admitted or rejected: kept out of the rejected share
		outcome = decisionsPeek
	case !dec.Allowed:
		outcome = decisionsRejected
	}
	m.kept.counter(m, seriesKey{c: c, kind: outcome}).Inc()
	tenant := c.Tenant.Slug
	switch {
	case dec.Degradation == decide.StoreUnavailable:
		m.degraded.WithLabelValues(tenant).Inc()
	case dec.Degraded:
		m.overload.WithLabelValues(tenant, dec.Degradation.Cause()).Inc()
	}
	if dec.Cached {
		m.denyHits.WithLabelValues(tenant).Inc()
	}
	m.latency.Observe(took.Seconds())
	if m.perRule && err == nil && !peek {
		for _, r := range dec.Rules {
			k := seriesKey{c: c, rule: r.Rule, tier: dec.Tier, kind: ruleAllowed}
			if decide.IsRequestLimit(r.Rule) {
				k.rule = nil
			}
			switch {
			case !r.Allowed && r.Rule.Shadow:
				k.kind = ruleShadowRejected
			case !r.Allowed:
				k.kind = ruleRejected
			case r.Limit > 0 && r.Remaining*5 < r.Limit:
				near := k
				near.kind = ruleNearLimit
				m.kept.counter(m, near).Inc()
			}
			m.kept.counter(m, k).Inc()
		}
	}
}

// Forget drops the series that a configuration change from old to next
// (nil: the tenant is gone) leaves about nothing: every series of a tenant
// that is gone or whose slug changed, and the per-rule series of its tiers
// and rules that are gone, disabled or renamed. A decider's /metrics then follows
// the configuration instead of growing with its history. old nil (a
// tenant new to the decider) forgets nothing.
func (m *Metrics) Forget(old, next *decide.Compiled) {
	if m == nil || old == nil {
		return
	}
	defer m.kept.forget()
	slug := old.Tenant.Slug
	if next == nil || next.Tenant.Slug != slug {
		tenant := prometheus.Labels{"tenant": slug}
		for _, v := range []*prometheus.CounterVec{m.decisions, m.degraded, m.overload, m.denyHits, m.resets, m.leases, m.rules, m.nearLimit} {
			v.DeletePartialMatch(tenant)
		}
		return
	}
	was, is := old.RuleNames(), next.RuleNames()
	forget := func(labels prometheus.Labels) {
		m.rules.DeletePartialMatch(labels)
		m.nearLimit.DeletePartialMatch(labels)
	}
	for tier, rules := range was {
		now, ok := is[tier]
		if !ok {
			forget(prometheus.Labels{"tenant": slug, "tier": tier})
			continue
		}
		for _, r := range rules {
			if !slices.Contains(now, r) {
				forget(prometheus.Labels{"tenant": slug, "tier": tier, "rule": r})
			}
		}
	}
}

// PerRule turns the per-rule counts (sluice_rule_decisions_total,
// sluice_rule_near_limit_total) on or off: a series per tenant, tier, rule
// and outcome, bounded by the configuration, never by clients; a fleet of
// many thousand tenants may do without. Call it before serving.
func (m *Metrics) PerRule(on bool) { m.perRule = on }

// ObserveIdentity records what named a proxied request's client.
func (m *Metrics) ObserveIdentity(source string) {
	if m == nil {
		return
	}
	m.proxied.WithLabelValues(source).Inc()
}

// UpstreamError counts one request the proxy could not forward.
func (m *Metrics) UpstreamError(reason string) {
	if m == nil {
		return
	}
	m.upstream.WithLabelValues(reason).Inc()
}

// observeReset records one reset asked for by tenant.
func (m *Metrics) observeReset(tenant string, err error) {
	if m == nil {
		return
	}
	outcome := "reset"
	if err != nil {
		outcome = "error"
	}
	m.resets.WithLabelValues(tenant, outcome).Inc()
}

func (m *Metrics) observeLease(tenant, op string, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.leases.WithLabelValues(tenant, op, outcome).Inc()
}

// inFlight collects sluice_in_flight_decisions, each tenant's decisions
// waiting on Redis now (decide.Decider.Loads), at scrape time: nothing is
// recorded per decision.
type inFlight struct{ d *decide.Decider }

var inFlightDesc = prometheus.NewDesc("sluice_in_flight_decisions",
	"Decisions waiting on Redis now, by tenant (bounded by -max-in-flight, shared fairly between tenants).", []string{"tenant"}, nil)

func (c inFlight) Describe(ch chan<- *prometheus.Desc) { ch <- inFlightDesc }

func (c inFlight) Collect(ch chan<- prometheus.Metric) {
	bySlug := map[string]int64{} // a slug given up and taken again names two tenants
	for _, l := range c.d.Loads() {
		bySlug[l.Tenant] += l.InFlight
	}
	for slug, n := range bySlug {
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(n), slug)
	}
}
