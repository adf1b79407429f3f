package fleet

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The metrics of each backend an adaptive rule guards, as this decider
// sees it, labelled by tenant, rule and backend (the rule's key-by values).
var (
	labels      = []string{"tenant", "rule", "backend"}
	limitDesc   = prometheus.NewDesc("sluice_adaptive_limit", "The fleet's limit of an adaptive concurrency rule's backend, as this decider last heard it.", labels, nil)
	flightDesc  = prometheus.NewDesc("sluice_adaptive_in_flight", "The most leases in flight on the backend (the fleet's) at this decider's admissions in the last window.", labels, nil)
	sampleDesc  = prometheus.NewDesc("sluice_adaptive_samples_total", "Releases through this decider by outcome: success, dropped (timed out, refused for overload) or ignored.", append(labels, "outcome"), nil)
	latencyDesc = prometheus.NewDesc("sluice_adaptive_latency_seconds_total", "The summed latency of the successful requests released through this decider: divided by their samples, the mean.", labels, nil)
	updateDesc  = prometheus.NewDesc("sluice_adaptive_updates_total", "Limits this decider set as the backend's updater.", labels, nil)
	updaterDesc = prometheus.NewDesc("sluice_adaptive_updater", "1 while this decider is the backend's updater: one decider of the fleet at a time.", labels, nil)
)

// Describe implements prometheus.Collector.
func (f *Fleet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{limitDesc, flightDesc, sampleDesc, latencyDesc, updateDesc, updaterDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (f *Fleet) Collect(ch chan<- prometheus.Metric) {
	f.backends.Range(func(_, v any) bool {
		b := v.(*backend)
		l := []string{b.tenant, b.ruleName, b.name}
		gauge := func(d *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append(l, extra...)...)
		}
		count := func(d *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append(l, extra...)...)
		}
		gauge(limitDesc, float64(b.limit.Load()))
		gauge(flightDesc, float64(b.inFlight.Load()))
		count(sampleDesc, float64(b.succeeded.Load()), "success")
		count(sampleDesc, float64(b.dropped.Load()), "dropped")
		count(sampleDesc, float64(b.ignored.Load()), "ignored")
		count(latencyDesc, float64(b.latency.Load())/1e6)
		count(updateDesc, float64(b.updates.Load()))
		updater := 0.0
		if b.updater.Load() {
			updater = 1
		}
		gauge(updaterDesc, updater)
		return true
	})
}
