// Package devstack runs Sluice in one process for development: today the
// decision API on the in-process engine with a seeded demo tenant. The
// control plane, Redis, Kafka and analytics join it as they land.
package devstack

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/dataplane"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/telemetry"
)

// Config configures Run.
type Config struct {
	// Addr is where the HTTP API listens; "127.0.0.1:0" picks a free port.
	Addr string
	// Out receives the banner with the address, the keys and a curl line.
	Out    io.Writer
	Logger *slog.Logger
	// ShutdownTimeout bounds the graceful stop; 0 means 5s.
	ShutdownTimeout time.Duration
}

// DemoSnapshot is the seeded tenant "demo": a free tier of 10 requests per
// minute per client (token bucket) and 5 logins per minute per client, and a
// pro tier of 100 per minute per client.
func DemoSnapshot() *policy.Snapshot {
	perMinute := func(alg policy.Algorithm, n int64) policy.Params {
		return policy.Params{Algorithm: alg, Limit: n, Window: time.Minute}
	}
	return &policy.Snapshot{
		Tenant:  policy.Tenant{ID: "demo", Slug: "demo", Name: "Demo", DefaultTier: "free"},
		Version: 1,
		Tiers: []policy.Tier{
			{Name: "free", Rules: []policy.Rule{
				{ID: "free-per-client", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true, Params: perMinute(policy.TokenBucket, 10)},
				{ID: "free-login", Name: "login", KeyBy: []string{"client_id"}, Enabled: true,
					Match: []policy.Match{{Key: "route", Value: "/login"}}, Params: perMinute(policy.SlidingWindow, 5)},
			}},
			{Name: "pro", Rules: []policy.Rule{
				{ID: "pro-per-client", Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true, Params: perMinute(policy.TokenBucket, 100)},
			}},
		},
	}
}

// Run serves until ctx ends, then shuts down within the timeout.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	engine := limit.NewEngine(limit.EngineConfig{})
	stopSweep := make(chan struct{})
	defer close(stopSweep)
	go engine.RunSweeper(stopSweep, 10*time.Second, time.Now)

	demo, err := decide.Compile(DemoSnapshot())
	if err != nil {
		return fmt.Errorf("devstack: demo config: %w", err)
	}
	keys := dataplane.NewKeys()
	checkKey, _ := policy.NewKeySecret(policy.KeyCheck)
	keys.Set(policy.HashKey(checkKey), demo)

	reg := telemetry.NewRegistry()
	reg.MustRegister(telemetry.NewEngineCollector(engine))
	var ready telemetry.Readiness
	mux := http.NewServeMux()
	telemetry.Mount(mux, reg, ready.Ready, nil)
	apiCfg := dataplane.HTTPConfig{
		Decider:      decide.New(decide.LocalEngine{Engine: engine, Now: time.Now}, time.Now),
		Authenticate: keys.Authenticate,
		Logger:       cfg.Logger,
	}
	api := dataplane.NewHTTPHandler(apiCfg)
	mux.Handle("POST /v1/check", api)
	mux.Handle("POST /shouldAllowRequest", api)
	mux.Handle(dataplane.NewDecisionService(apiCfg))

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("devstack: listen: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true) // gRPC checks without TLS
	ready.SetReady(true)
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(cfg.Out, `Sluice dev is running: the decision API on the in-process engine, tenant "demo".
  API        %[1]s  (/v1/check, /shouldAllowRequest, /healthz, /readyz, /metrics)
  check key  %[2]s
  try        curl -s -X POST %[1]s/v1/check -H 'Authorization: Bearer %[2]s' -d '{"descriptors":{"client_id":"alice"}}'
Ctrl-C stops it.
`, base, checkKey)

	return telemetry.Serve(ctx, srv, ln, cfg.ShutdownTimeout)
}
