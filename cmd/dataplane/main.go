// Command dataplane is a Sluice decider: it follows the control plane's
// configuration, decides checks against Redis (or, without Redis, its own
// memory), and serves the HTTP check API with /healthz, /readyz and /metrics.
//
// Configuration (flags override the environment):
//
//	-addr           SLUICE_DATAPLANE_ADDR     listen address (default 127.0.0.1:8080)
//	-control-plane  SLUICE_CONTROL_PLANE_URL  control plane URL (default http://127.0.0.1:8081)
//	-redis-url      REDIS_URL                 redis:// URL; empty decides in this process only
//	-redis-prefix   SLUICE_REDIS_PREFIX       prefix of every counter key (default none)
//	-redis-batch    SLUICE_REDIS_BATCH        coalesce concurrent decisions into pipelines (default true)
//	-state-file     SLUICE_STATE_FILE         last-known-good config (default <user cache dir>/sluice/decider-snapshot.pb)
//	-kafka-brokers  KAFKA_BROKERS             comma-separated brokers for decision events; empty sends none
//	-events-topic   SLUICE_EVENTS_TOPIC       topic of decision events (default sluice.decisions)
//	-budget         SLUICE_DECISION_BUDGET    time budget of one Redis call (default 50ms)
//	-local-share    SLUICE_LOCAL_SHARE        share of a limit enforced locally while Redis fails (default 1)
//	-rls-addr       SLUICE_RLS_ADDR           listen address of Envoy's rate limit service over gRPC (default 127.0.0.1:8089; "off" disables)
//	                SLUICE_DECIDER_KEY        the decider credential; environment only
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/dataplane"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dataplane:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	fs := flag.NewFlagSet("dataplane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", env("SLUICE_DATAPLANE_ADDR", "127.0.0.1:8080"), "listen address")
	cpURL := fs.String("control-plane", env("SLUICE_CONTROL_PLANE_URL", "http://127.0.0.1:8081"), "control plane URL")
	redisURL := fs.String("redis-url", env("REDIS_URL", ""), "redis:// URL; empty decides in this process only")
	redisPrefix := fs.String("redis-prefix", env("SLUICE_REDIS_PREFIX", ""), "prefix of every counter key")
	batch := fs.Bool("redis-batch", env("SLUICE_REDIS_BATCH", "true") != "false", "coalesce concurrent decisions into pipelines")
	stateFile := fs.String("state-file", env("SLUICE_STATE_FILE", filepath.Join(cache, "sluice", "decider-snapshot.pb")), "last-known-good config")
	brokers := fs.String("kafka-brokers", env("KAFKA_BROKERS", ""), "comma-separated brokers for decision events")
	topic := fs.String("events-topic", env("SLUICE_EVENTS_TOPIC", "sluice.decisions"), "topic of decision events")
	budget := fs.Duration("budget", durationEnv(getenv, "SLUICE_DECISION_BUDGET", 50*time.Millisecond), "time budget of one Redis call")
	share := fs.Float64("local-share", floatEnv(getenv, "SLUICE_LOCAL_SHARE", 1), "share of a limit enforced locally while Redis fails")
	rlsAddr := fs.String("rls-addr", env("SLUICE_RLS_ADDR", "127.0.0.1:8089"), `Envoy rate limit service (gRPC) listen address; "off" disables`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	if err := os.MkdirAll(filepath.Dir(*stateFile), 0o700); err != nil {
		return err
	}

	keys := dataplane.NewKeys()
	syncer := dataplane.NewSyncer(dataplane.SyncConfig{
		Client: sluicev1connect.NewConfigServiceClient(http.DefaultClient, *cpURL),
		Key:    getenv("SLUICE_DECIDER_KEY"), Keys: keys, StateFile: *stateFile, Logger: logger,
	})
	go func() { _ = syncer.Run(ctx) }()

	local := limit.NewEngine(limit.EngineConfig{})
	stopSweep := make(chan struct{})
	defer close(stopSweep)
	go local.RunSweeper(stopSweep, 10*time.Second, time.Now)
	opts := decide.Options{Engine: decide.LocalEngine{Engine: local, Now: time.Now}}
	if *redisURL != "" {
		ropts, err := redis.ParseURL(*redisURL)
		if err != nil {
			return fmt.Errorf("REDIS_URL: %w", err)
		}
		ropts.ContextTimeoutEnabled = true // the decision budget must bound every call
		client := redis.NewClient(ropts)
		defer client.Close()
		eng := redisengine.New(client, redisengine.Config{Prefix: *redisPrefix, Batch: *batch})
		defer eng.Close()
		if err := eng.Preload(ctx); err != nil {
			logger.WarnContext(ctx, "redis unreachable at start; rules follow their failure modes", "err", err)
		}
		opts = decide.Options{Engine: eng, Local: local, LocalShare: *share, Budget: *budget,
			BreakerFailures: 5, BreakerCooldown: time.Second, DenyCacheSize: 100_000}
	}
	decider := decide.NewDecider(opts)

	reg := telemetry.NewRegistry()
	reg.MustRegister(telemetry.NewEngineCollector(local), versionCollector{syncer})
	mux := http.NewServeMux()
	telemetry.Mount(mux, reg, syncer.Ready, func() any { return map[string]any{"config_versions": syncer.Versions()} })
	apiCfg := dataplane.HTTPConfig{Decider: decider, Authenticate: keys.Authenticate, Logger: logger,
		Metrics: dataplane.NewMetrics(reg, decider)}
	if *brokers != "" {
		host, _ := os.Hostname()
		pub := events.NewPublisher(events.Config{Brokers: strings.Split(*brokers, ","), Topic: *topic,
			Decider: host + "/" + strconv.Itoa(os.Getpid()), Logger: logger})
		go func() { _ = pub.Run(ctx) }()
		apiCfg.Events = pub
	}
	api := dataplane.NewHTTPHandler(apiCfg)
	mux.Handle("POST /v1/check", api)
	mux.Handle("POST /shouldAllowRequest", api)
	mux.Handle(dataplane.NewDecisionService(apiCfg))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true) // gRPC checks without TLS
	fmt.Fprintf(stdout, "decider listening on http://%s\n", ln.Addr())
	if *rlsAddr != "off" {
		rln, err := net.Listen("tcp", *rlsAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("rls: %w", err)
		}
		gs := dataplane.NewRLSServer(apiCfg)
		go func() { _ = gs.Serve(rln) }()
		defer gs.GracefulStop()
		fmt.Fprintf(stdout, "Envoy rate limit service on %s\n", rln.Addr())
	}
	return telemetry.Serve(ctx, srv, ln, 10*time.Second)
}

// versionCollector exports the config version enforced for each tenant.
type versionCollector struct{ s *dataplane.Syncer }

var versionDesc = prometheus.NewDesc("sluice_config_version", "Config version enforced for a tenant.", []string{"tenant"}, nil)

func (versionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- versionDesc }

func (c versionCollector) Collect(ch chan<- prometheus.Metric) {
	for tenant, v := range c.s.Versions() {
		ch <- prometheus.MustNewConstMetric(versionDesc, prometheus.GaugeValue, float64(v), tenant)
	}
}

func durationEnv(getenv func(string) string, k string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(getenv(k)); err == nil {
		return d
	}
	return def
}

func floatEnv(getenv func(string) string, k string, def float64) float64 {
	if f, err := strconv.ParseFloat(getenv(k), 64); err == nil {
		return f
	}
	return def
}
