// Package telemetry holds what every binary exposes: /healthz, /readyz and
// /metrics on a Prometheus registry.
package telemetry

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/internal/limit"
)

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Readiness is a binary's readiness: false until its first good config load.
// The zero value is not ready; it is safe for concurrent use.
type Readiness struct{ ready atomic.Bool }

// SetReady marks the binary ready (or not).
func (r *Readiness) SetReady(ok bool) { r.ready.Store(ok) }

// Mount registers /healthz (the process is up), /readyz (ready, else 503)
// and /metrics on mux.
func Mount(mux *http.ServeMux, reg *prometheus.Registry, ready *Readiness) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
}

// EngineCollector exports an in-process engine's counters.
type EngineCollector struct {
	engine                   *limit.Engine
	keys, evictions, expired *prometheus.Desc
}

// NewEngineCollector returns a collector of e's Stats.
func NewEngineCollector(e *limit.Engine) *EngineCollector {
	return &EngineCollector{
		engine:    e,
		keys:      prometheus.NewDesc("sluice_local_engine_keys", "Limiter keys tracked by the in-process engine.", nil, nil),
		evictions: prometheus.NewDesc("sluice_local_engine_evictions_total", "Live keys dropped at the in-process engine's memory cap.", nil, nil),
		expired:   prometheus.NewDesc("sluice_local_engine_expirations_total", "Expired keys removed from the in-process engine.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *EngineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.evictions
	ch <- c.expired
}

// Collect implements prometheus.Collector.
func (c *EngineCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.engine.Stats()
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.Keys))
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.Evictions))
	ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(st.Expirations))
}
