// Package telemetry holds what every binary exposes: /healthz, /readyz and
// /metrics on a Prometheus registry.
package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

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

// Ready reports whether r is ready.
func (r *Readiness) Ready() bool { return r.ready.Load() }

// Mount registers /healthz (the process is up), /readyz, /metrics and
// Go's profiles (/debug/pprof/) on mux. /readyz answers 200 when ready() holds, else 503, with a JSON body
// {"ready": …, "info": info()} (info may be nil: a deciders' enforced
// config versions, say). It is the admin listener's (see MountPublic).
func Mount(mux *http.ServeMux, reg *prometheus.Registry, ready func() bool, info func() any) {
	mountHealth(mux, ready, info)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// Go's profiles, as operators expect them on an admin port:
	// go tool pprof http://ADMIN/debug/pprof/profile?seconds=30.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// MountPublic registers what a load balancer needs on a port that every
// client reaches: /healthz and /readyz ({"ready": …}, 200 or 503), with
// nothing about tenants or traffic. Metrics and detailed health are the
// admin listener's (Mount).
func MountPublic(mux *http.ServeMux, ready func() bool) { mountHealth(mux, ready, nil) }

func mountHealth(mux *http.ServeMux, ready func() bool, info func() any) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok := ready()
		body := map[string]any{"ready": ok}
		if info != nil {
			body["info"] = info()
		}
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
}

// ServeAdmin serves mux (Mount's) on addr until ctx ends or stop is
// called, plaintext: an admin listener, on loopback unless the operator
// exposes it on purpose. "off" serves nothing. It returns the address it
// listens on ("" when off) and stop, which ends it and waits.
func ServeAdmin(ctx context.Context, addr string, mux *http.ServeMux) (at string, stop func(), _ error) {
	if addr == "off" {
		return "", func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("admin listener: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = Serve(ctx, srv, ln, 5*time.Second) }()
	return ln.Addr().String(), func() { cancel(); <-done }, nil
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

// Probe is a dependency's health for /readyz: the last answer of its
// check, asked at most once per interval however often /readyz is asked,
// and bounded by that interval. It is safe for concurrent use.
type Probe struct {
	check func(context.Context) error
	every time.Duration

	mu sync.Mutex
	at time.Time // of the last check; zero: none yet
	ok bool
}

// NewProbe returns a probe of check, asked at most once per every.
func NewProbe(check func(context.Context) error, every time.Duration) *Probe {
	return &Probe{check: check, every: every}
}

// OK reports whether the last check succeeded, checking again first when
// it is older than the interval.
func (p *Probe) OK() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at.IsZero() || time.Since(p.at) >= p.every {
		ctx, cancel := context.WithTimeout(context.Background(), p.every)
		p.ok = p.check(ctx) == nil
		cancel()
		p.at = time.Now()
	}
	return p.ok
}

// Server is what Serve runs: an *http.Server, or a server like it whose
// Serve returns http.ErrServerClosed after Shutdown.
type Server interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
}

// Serve runs srv on ln until ctx ends, then shuts it down gracefully within
// timeout. It returns nil after a clean shutdown.
func Serve(ctx context.Context, srv Server, ln net.Listener, timeout time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
