package dataplane

import (
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
	denyHits  *prometheus.CounterVec
	resets    *prometheus.CounterVec
	latency   prometheus.Histogram
}

// NewMetrics registers the decision metrics on reg, and the breaker state
// of decider (0 closed, 1 half-open, 2 open).
func NewMetrics(reg prometheus.Registerer, decider *decide.Decider) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_decisions_total",
			Help: "Decisions by tenant and outcome (allowed, rejected, peek, error)."}, []string{"tenant", "outcome"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_failure_mode_decisions_total",
			Help: "Decisions answered by the rules' failure modes because the engine failed or its breaker was open."}, []string{"tenant"}),
		denyHits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_deny_cache_hits_total",
			Help: "Rejections answered from the deny cache, without the engine."}, []string{"tenant"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_resets_total",
			Help: "Counter resets asked of this decider, by tenant and outcome (reset, error)."}, []string{"tenant", "outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_decision_seconds",
			Help: "Time to decide, as the decider sees it.", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14)}),
	}
	states := map[string]float64{"closed": 0, "half-open": 1, "open": 2}
	reg.MustRegister(m.decisions, m.degraded, m.denyHits, m.resets, m.latency, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_breaker_state",
		Help: "State of the engine's circuit breaker: 0 closed, 1 half-open, 2 open."}, func() float64 { return states[decider.BreakerState()] }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_engine_errors_total",
			Help: "Failed calls to the decision engine (Redis errors and timeouts)."}, func() float64 { return float64(decider.EngineErrors()) }))
	return m
}

// observe records one decision of tenant.
func (m *Metrics) observe(tenant string, peek bool, dec decide.Decision, err error, took time.Duration) {
	if m == nil {
		return
	}
	outcome := "allowed"
	switch {
	case err != nil:
		outcome = "error"
	case peek: // asked, not admitted or rejected: kept out of the rejected share
		outcome = "peek"
	case !dec.Allowed:
		outcome = "rejected"
	}
	m.decisions.WithLabelValues(tenant, outcome).Inc()
	if dec.Degraded {
		m.degraded.WithLabelValues(tenant).Inc()
	}
	if dec.Cached {
		m.denyHits.WithLabelValues(tenant).Inc()
	}
	m.latency.Observe(took.Seconds())
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
