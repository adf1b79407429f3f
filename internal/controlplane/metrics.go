package controlplane

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics counts the API's calls by procedure and answer (refusals by the
// authentication included: it sits outside it), times the unary ones, and
// gauges the deciders' open config watches.
type metrics struct {
	calls   *prometheus.CounterVec
	seconds *prometheus.HistogramVec
	watches prometheus.Gauge
	// wentBack counts the tenants' configurations deciders held that the
	// database no longer has: versions raised past a decider's (resync),
	// and snapshots sent in place of a lost one.
	wentBack prometheus.Counter
	// snapshots counts the tenant snapshots sent to deciders, by where
	// they came from: the cache, or a read of the database.
	snapshots *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_api_calls_total",
			Help: "Control-plane API calls by procedure and answer (ok, or the Connect code)."}, []string{"procedure", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_api_call_seconds",
			Help:    "Time to answer a unary control-plane API call.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}, []string{"procedure"}),
		watches: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_config_watches",
			Help: "Config watch streams open (deciders connected to this control plane)."}),
		wentBack: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_config_went_back_total",
			Help: "Tenant configurations a decider held that the database no longer has (restored from a backup, failed over to a replica behind): replaced by the database's."}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_config_snapshots_sent_total",
			Help: "Tenant snapshots sent to deciders, by source: cache (read once for every decider pulling that version) or database."}, []string{"source"}),
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.seconds, m.watches, m.wentBack, m.snapshots)
	}
	return m
}

func codeLabel(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

func (m *metrics) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		res, err := next(ctx, req)
		p := req.Spec().Procedure
		m.seconds.WithLabelValues(p).Observe(time.Since(start).Seconds())
		m.calls.WithLabelValues(p, codeLabel(err)).Inc()
		return res, err
	}
}

func (m *metrics) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (m *metrics) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		m.watches.Inc()
		defer m.watches.Dec()
		err := next(ctx, conn)
		m.calls.WithLabelValues(conn.Spec().Procedure, codeLabel(err)).Inc()
		return err
	}
}
