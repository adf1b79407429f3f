package dataplane

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/checkapi"
	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/decision"
	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/fleet"
	"github.com/sluicehq/sluice/internal/follower"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/grpcserve"
	"github.com/sluicehq/sluice/internal/httpport"
	"github.com/sluicehq/sluice/internal/kafkasec"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/proxy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/regions"
	"github.com/sluicehq/sluice/internal/spool"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/tlsfiles"
	"github.com/sluicehq/sluice/internal/tracing"
)

// GRPCStopGrace bounds how long a stopping decider waits for its gRPC
// calls and streams (a health Watch never ends by itself) after the HTTP
// side has drained.
const GRPCStopGrace = 5 * time.Second

// Server is a decider built from its Settings: the decision service every
// API serves, the config follower feeding it, and their metrics. New
// starts its background work; Close stops it.
type Server struct {
	// Service is the decision service: Decide and Reset, with the
	// recording of metrics, events and spans.
	Service  decision.Service
	Follower *follower.Follower
	Keys     *follower.Keys
	Registry *prometheus.Registry
	cfg      Settings
	parsed   parsedConfig
	stops    []func() // Close runs them last first
}

// New builds and starts cfg's decider: its engines, the decider, its
// metrics, the config follower and the events publisher, in that order.
// An invalid cfg is an error before anything starts.
func New(ctx context.Context, cfg Settings) (_ *Server, err error) {
	p, err := cfg.parsed()
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	if cfg.Getenv == nil {
		cfg.Getenv = func(string) string { return "" }
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = host + "/" + strconv.Itoa(os.Getpid())
	}
	if err := os.MkdirAll(filepath.Dir(cfg.StateFile), 0o700); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	d := &Server{cfg: cfg, parsed: p, Registry: cfg.Registry}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	// Background work stops when the decider closes.
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.stops = append(d.stops, cancel)

	// The counters, then the decider.
	local := limit.NewEngine(limit.EngineConfig{})
	stopSweep := make(chan struct{})
	d.stops = append(d.stops, func() { close(stopSweep) })
	go local.RunSweeper(stopSweep, 10*time.Second, time.Now)
	opts := decide.Options{Counters: decide.InProcess{Engine: local, Now: time.Now}}
	var redisEngine *redisengine.Engine
	var silent func() []string // the regions this decider has not heard from
	var replicator *regions.Replicator
	if cfg.RedisURL != "" {
		eng, err := redisengine.Open(cfg.RedisURL, redisengine.ClientOptions{Cluster: cfg.RedisCluster, Sentinel: cfg.RedisSentinel, Spin: cfg.RedisSpin},
			redisengine.Config{Prefix: cfg.RedisPrefix, Batch: cfg.RedisBatch, MaxLocalKeys: cfg.SyncMaxKeys, Timeout: cfg.RedisTimeout,
				BreakerFailures: 5, BreakerCooldown: time.Second, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		d.stops = append(d.stops, func() { // what was counted locally goes to Redis; closes the client
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			eng.Shutdown(sctx)
		})
		redisEngine = eng
		if err := eng.Preload(ctx); err != nil {
			logger.WarnContext(ctx, "redis unreachable at start; rules follow their failure modes", "err", err)
		}
		go eng.WatchEviction(bctx, 5*time.Minute, logger) // sluice_redis_evicting_nodes
		opts = decide.Options{Counters: eng, Local: local, LocalShare: cfg.LocalShare, Budget: cfg.Budget, DenyCacheSize: 100_000,
			MaxInFlight: cfg.MaxInFlight, Overload: p.overload, Logger: logger}
		if p.global != nil { // global rules: the other regions' counts
			gc := *p.global
			gc.Logger = logger
			gc.Apply = func(ctx context.Context, charges []regions.Charge) error { // meters: the other regions' admissions
				rcs := make([]redisengine.RemoteCharge, len(charges))
				for i, c := range charges {
					rcs[i] = redisengine.RemoteCharge{Key: c.Key, Run: c.Run, Count: c.Count, Interval: c.Interval}
				}
				return eng.ChargeRemote(ctx, rcs)
			}
			rep, err := regions.Start(gc)
			if err != nil {
				return nil, fmt.Errorf("-global-kafka: %w", err)
			}
			d.stops = append(d.stops, func() { _ = rep.Close() })
			opts.Global = rep.Table()
			silent = func() []string { return rep.Table().Silent(time.Now()) }
			replicator = rep
		}
	}
	var adaptive *fleet.Fleet
	if redisEngine != nil { // adaptive concurrency rules: one limit for the fleet
		adaptive = fleet.New(fleet.Config{Client: redisEngine.Client(), Prefix: cfg.RedisPrefix, Adapter: redisEngine,
			Name: cfg.Name + "/" + strconv.FormatInt(decide.NewLease(), 36), Logger: logger})
		opts.Adaptive = adaptive
		go adaptive.Run(bctx)
	}
	decider := decide.NewDecider(opts)
	if redisEngine != nil { // resets made by other deciders
		wctx, stop := context.WithCancel(bctx)
		d.stops = append(d.stops, stop)
		go redisEngine.WatchResets(wctx, decider.Forget, logger, nil)
	}

	// Its metrics, then the config follower that tells them what changed.
	if d.Registry == nil {
		d.Registry = telemetry.NewRegistry()
	}
	reg := d.Registry
	metrics := decision.NewMetrics(reg, decider)
	metrics.PerRule(cfg.RuleMetrics)
	d.Keys = follower.NewKeys()
	health := &follower.Health{}
	health.SetDecider(decider, redisEngine != nil)
	health.SetRegion(cfg.Region, silent)
	d.Follower = follower.New(follower.Config{
		Client: sluicev1connect.NewConfigServiceClient(http.DefaultClient, cfg.ControlPlane), HealthFunc: health.Report,
		Key: cfg.DeciderKey, KeyFunc: cfg.DeciderKeyFunc, Keys: d.Keys, StateFile: cfg.StateFile, Repull: cfg.ConfigRepull,
		Logger: logger, Name: cfg.Name, ShadowAll: cfg.ShadowMode, OnChange: metrics.Forget,
		OnFleet: func(live int) {
			if cfg.LocalShare == 0 { // each decider its part of the fleet
				decider.SetLocalShare(1 / float64(live))
			}
		},
	})
	// Closing waits for the syncer, so that its last state file is written
	// before the process exits (or a test removes its directory).
	syncCtx, stopSync := context.WithCancel(bctx)
	synced := make(chan struct{})
	go func() { _ = d.Follower.Run(syncCtx); close(synced) }()
	d.stops = append(d.stops, func() { stopSync(); <-synced })
	reg.MustRegister(append(configMetrics(d.Follower), telemetry.NewEngineCollector(local))...)
	if redisEngine != nil {
		reg.MustRegister(redisEngineMetrics(redisEngine)...)
	}
	if replicator != nil {
		reg.MustRegister(replicationMetrics(replicator)...)
	}
	if adaptive != nil {
		reg.MustRegister(adaptive) // sluice_adaptive_*
	}

	// The decision service, tracing and publishing its decisions.
	d.Service = decision.Service{Decider: decider, Authenticate: d.Keys.Authenticate, Logger: logger,
		Metrics: metrics, Headers: p.headers, QuotaMode: cfg.QuotaMode, KeyGuard: decision.NewKeyGuard(cfg.AuthFailures, logger, reg), Tracer: cfg.Tracer}
	if d.Service.Tracer == nil {
		tracer, stopTracing, err := tracing.Setup(ctx, "sluice-dataplane", cfg.Getenv)
		if err != nil {
			return nil, err
		}
		d.stops = append(d.stops, stopTracing)
		d.Service.Tracer = tracer
	}
	if cfg.KafkaBrokers != "" {
		stopEvents, err := publish(ctx, cfg, reg, health, &d.Service)
		if err != nil {
			return nil, err
		}
		d.stops = append(d.stops, stopEvents)
	}
	return d, nil
}

// Close stops what New started, last first: the events publisher's last
// flush, tracing, the config follower (its last state file written), the
// resets watch, and the Redis engine (local counts sent). Call it after
// the listeners have drained.
func (d *Server) Close() {
	for i := len(d.stops) - 1; i >= 0; i-- {
		d.stops[i]()
	}
	d.stops = nil
}

// Mount routes the check APIs on mux: every protocol's HTTP routes (with
// CORS for the origins configured) and Connect's DecisionService.
func (d *Server) Mount(mux *http.ServeMux) {
	routes := HTTPRoutes(httpport.NewAPI(d.Service))
	httpport.Mount(mux, routes, httpport.CORS(flagenv.List(d.cfg.CORSOrigins), httpport.Handler(routes)))
	mux.Handle(checkapi.NewDecisionService(d.Service))
}

// Serve serves cfg's decider on its listeners until ctx ends, then stops it:
// the listeners drain, the local counts go to Redis, the last events to
// Kafka, and the last configuration to the state file. An invalid cfg is
// an error before anything starts.
func Serve(ctx context.Context, cfg Settings) error {
	// What Serve starts stops when it returns, an error at start included.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	cfg = d.cfg
	// The port every tenant's applications reach tells nothing of tenants:
	// metrics and the versions enforced are the admin listener's.
	mux := http.NewServeMux()
	telemetry.MountPublic(mux, d.Follower.Ready)
	admin := http.NewServeMux()
	telemetry.Mount(admin, d.Registry, d.Follower.Ready, func() any { return map[string]any{"config_versions": d.Follower.Versions()} })
	adminAt, stopAdmin, err := telemetry.ServeAdmin(ctx, cfg.AdminAddr, admin)
	if err != nil {
		return err
	}
	defer stopAdmin()
	d.Mount(mux)

	ln, scheme, err := tlsfiles.Listen(cfg.Addr, cfg.TLS.Cert, cfg.TLS.Key, cfg.TLS.ClientCA)
	if err != nil {
		return err
	}
	// The check routes on fasthttp, everything else (and browsers' checks,
	// for CORS) through mux; HTTP/2 for gRPC and Connect checks (with TLS,
	// the connections that chose h2 by ALPN).
	api := httpport.NewAPI(d.Service)
	newServer := httpport.NewServer
	if !cfg.HTTPFast {
		newServer = httpport.NewStdServer
	}
	srv := newServer(api, HTTPRoutes(api), mux)
	fmt.Fprintf(cfg.Stdout, "decider listening on %s://%s\n", scheme, ln.Addr())
	if adminAt != "" {
		fmt.Fprintf(cfg.Stdout, "admin (metrics, detailed health) on http://%s\n", adminAt)
	}
	if cfg.Proxy.On() {
		stopProxy, err := serveProxy(ctx, cfg.Stdout, cfg.Proxy, d.parsed, d.Service, d.Keys)
		if err != nil {
			ln.Close()
			return err
		}
		defer stopProxy()
	}
	if cfg.GRPCAddr != "off" {
		stopGRPC, err := serveGRPC(ctx, cfg.Stdout, cfg, d.Service, d.Follower)
		if err != nil {
			ln.Close()
			return err
		}
		defer stopGRPC()
	}
	return telemetry.Serve(ctx, srv, ln, 10*time.Second)
}

// publish starts the events publisher of cfg into apiCfg.Events, and
// returns what stops it. It outlives the servers: its last flush, after
// they have stopped, carries the events and counts of their last
// decisions, and the process exits only after it.
func publish(ctx context.Context, cfg Settings, reg *prometheus.Registry, health *follower.Health, apiCfg *decision.Service) (func(), error) {
	sec := cfg.Kafka
	if sec == nil {
		sec = &kafkasec.Config{}
	}
	transport, err := sec.Transport()
	if err != nil {
		return nil, err
	}
	pcfg := events.Config{Brokers: strings.Split(cfg.KafkaBrokers, ","), Topic: cfg.EventsTopic, Transport: transport,
		Decider: cfg.Name, Region: cfg.Region, DeltaInterval: cfg.EventsDeltaInterval, Logger: cfg.Logger}
	if pcfg.Spool, err = openSpool(ctx, cfg.Logger, cfg.EventsSpool, cfg.StateFile, cfg.EventsSpoolMB); err != nil {
		return nil, err
	}
	pub := events.NewPublisher(pcfg)
	health.SetEvents(pub)
	pctx, stopEvents := context.WithCancel(context.WithoutCancel(ctx))
	published := make(chan struct{})
	go func() { defer close(published); _ = pub.Run(pctx) }()
	reg.MustRegister(publisherMetrics(pub)...)
	apiCfg.Events = pub
	return func() { stopEvents(); <-published }, nil
}

// openSpool opens the events spool in dir: default events-spool beside
// the state file, "off" none.
func openSpool(ctx context.Context, logger *slog.Logger, dir, stateFile string, mb int) (*spool.Spool, error) {
	if dir == "off" {
		return nil, nil
	}
	if dir == "" {
		dir = filepath.Join(filepath.Dir(stateFile), "events-spool")
	}
	return events.OpenSpool(ctx, logger, dir, int64(mb)<<20)
}

// serveGRPC starts the gRPC listener of cfg (Envoy's rate limit
// service, DecisionService, gubernator's V1, gRPC health), and returns
// what stops it.
func serveGRPC(ctx context.Context, stdout io.Writer, cfg Settings, apiCfg decision.Service, syncer *follower.Follower) (func(), error) {
	rln, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("grpc: %w", err)
	}
	var opts []grpcserve.Option
	if t := cfg.GRPCTLS; t.Cert != "" || t.Key != "" || t.ClientCA != "" {
		tlsCfg, err := tlsfiles.ServerConfig(t.Cert, t.Key, t.ClientCA)
		if err != nil {
			rln.Close()
			return nil, fmt.Errorf("grpc: %w", err)
		}
		opts = append(opts, grpcserve.WithTLS(tlsCfg))
	}
	if cfg.GRPCMaxConnectionAge > 0 {
		opts = append(opts, grpcserve.WithMaxConnectionAge(cfg.GRPCMaxConnectionAge, cfg.GRPCMaxConnectionAgeGrace))
	}
	gs := grpcserve.NewServer(apiCfg, opts...)
	RegisterGRPC(gs, apiCfg)
	stopHealth := grpcserve.ServeHealth(gs, syncer.Loaded(), GRPCServices...)
	go func() { <-ctx.Done(); stopHealth() }() // balancers drain first
	go func() { _ = gs.Serve(rln) }()
	fmt.Fprintf(stdout, "gRPC (Envoy rate limit service, DecisionService) on %s\n", rln.Addr())
	return func() { grpcserve.Stop(gs, GRPCStopGrace) }, nil
}

// serveProxy starts the reverse proxy of x in front of its upstream (or,
// with x.ForwardAuth, the forward-auth service), for the tenant of its
// check key, over TLS when its files are named (after the PROXY protocol
// of its balancers), and returns what stops it.
func serveProxy(ctx context.Context, stdout io.Writer, x Proxy, p parsedConfig, api decision.Service, keys *follower.Keys) (func(), error) {
	pc := p.proxy
	if x.JWTClaim != "" {
		jwt, err := proxy.NewJWKSIdentity(ctx, x.JWTClaim, x.JWKSURL, x.JWTIssuer, x.JWTAudience)
		if err != nil {
			return nil, err
		}
		pc.JWT = jwt
	}
	lbs, _ := clientip.ParsePrefixes(x.ProxyProtocol) // checked by Validate
	hash := policy.HashKey(x.Key)                     // once, not per proxied request
	pc.API, pc.Upstream = api, p.upstream
	pc.Tenant = func() (*decide.Compiled, error) { return keys.Lookup(hash) }
	tcp, err := net.Listen("tcp", x.Addr)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	// The PROXY header comes first on the wire, before any TLS.
	ln, scheme, err := tlsfiles.Wrap(clientip.ProxyProtocol(tcp, lbs), x.TLS.Cert, x.TLS.Key, x.TLS.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	srv := &http.Server{Handler: proxy.New(pc), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); _ = telemetry.Serve(ctx, srv, ln, 10*time.Second) }()
	if pc.ForwardAuth {
		fmt.Fprintf(stdout, "answering forward-auth calls on %s://%s\n", scheme, ln.Addr())
	} else {
		fmt.Fprintf(stdout, "proxying %s://%s to %s\n", scheme, ln.Addr(), p.upstream.Redacted())
	}
	return func() { <-done }, nil
}
