// Package devstack runs Sluice in one process for development: the control
// plane on PostgreSQL, a decider on Redis publishing decision events to
// Kafka, and the analytics consumer, wired together over loopback, with a
// demo tenant seeded on first run. Services come from the environment,
// else the local defaults, else embedded stand-ins (the in-process engine
// for Redis, kfake for Kafka).
package devstack

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/atomicfile"
	"github.com/sluicehq/sluice/internal/controlplane"
	"github.com/sluicehq/sluice/internal/dataplane"
	"github.com/sluicehq/sluice/internal/grpcserve"
	"github.com/sluicehq/sluice/internal/kafkasec"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/prune"
	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/rlheaders"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/migrations"
	"github.com/sluicehq/sluice/web"
)

// Config configures Run.
type Config struct {
	// Addr is where the HTTP API listens; "127.0.0.1:0" picks a free port.
	Addr string
	// GRPCAddr is where the grpc-go listener (Envoy RLS, DecisionService)
	// listens; "" picks a free loopback port.
	GRPCAddr string
	// DatabaseURL, else the local server's sluice_dev database.
	DatabaseURL string
	// RedisURL, else the local server, else the in-process engine.
	RedisURL string
	// RedisCluster: RedisURL names a Redis Cluster's seed nodes;
	// RedisSentinel: Sentinels and, as master_name, their master.
	RedisCluster, RedisSentinel bool
	RedisPrefix                 string
	// KafkaBrokers (comma-separated), else an embedded Kafka-protocol
	// broker (kfake) keeping its data in Dir.
	KafkaBrokers string
	// KafkaSec connects to KafkaBrokers (TLS, SASL); nil is plaintext.
	// The embedded broker needs none.
	KafkaSec *kafkasec.Config
	// EventsTopic is the decision-events topic; "" means sluice.decisions.
	EventsTopic string
	// DeltaInterval is how often the decider sends counter deltas; 0
	// means 10s.
	DeltaInterval time.Duration
	// Budget is how long a decision may wait in the decider to be sent to
	// Redis, past which the overload policy answers; 0 means 50ms, the
	// decider's default.
	Budget time.Duration
	// Headers is the style of the rate limit headers answered.
	Headers rlheaders.Style
	// Region is the decider's region, which its reports are tagged with;
	// "" names none.
	Region string
	// Dir keeps the dev keys and the decider's snapshot; "" means
	// <user cache dir>/sluice/dev.
	Dir string
	// Reset starts from a clean demo: the dev database (sluice_dev, or the
	// private cluster's) dropped and made again, the dev keys, the
	// embedded broker's events and the decider's snapshot deleted. It
	// refuses a DATABASE_URL of the user's own.
	Reset bool
	// Out receives the banner with the address, the keys and a curl line.
	Out    io.Writer
	Logger *slog.Logger
	// Tracer, when set, traces decisions and API calls (tracing.Setup).
	Tracer trace.Tracer
}

// LocalDatabase is the server tried when DatabaseURL is empty.
const LocalDatabase = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// LocalRedis is the server tried when RedisURL is empty.
const LocalRedis = "redis://127.0.0.1:6379"

// devKeys are the development secrets, kept in Dir so that a second run can
// print them again (production keys are only ever stored hashed).
type devKeys struct {
	Operator string `json:"operator"`
	Decider  string `json:"decider"`
	Admin    string `json:"admin"`
	Check    string `json:"check"`
	Viewer   string `json:"viewer,omitempty"` // absent in dev directories of before viewer keys
}

// Run serves until ctx ends, then shuts down.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return err
		}
		cfg.Dir = filepath.Join(cache, "sluice", "dev")
	}
	if cfg.Reset && cfg.DatabaseURL != "" {
		return errors.New("devstack: -reset drops the dev database, and DATABASE_URL names a database of your own: unset it, or empty that database yourself")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return err
	}
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = "127.0.0.1:0"
	}
	if cfg.EventsTopic == "" {
		cfg.EventsTopic = "sluice.decisions"
	}
	// The ports first: a second sluice dev on them stops here, before it
	// touches the database (where it would seed keys of its own).
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("devstack: listen: %w", err)
	}
	defer ln.Close()
	gln, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("devstack: listen (gRPC): %w", err)
	}
	defer gln.Close()
	if cfg.Reset { // the ports are ours: no other sluice dev runs on this directory's state
		for _, name := range []string{"keys.json", "decider-snapshot.pb", "kafka"} {
			if err := os.RemoveAll(filepath.Join(cfg.Dir, name)); err != nil {
				return fmt.Errorf("devstack: reset: %w", err)
			}
		}
	}
	dbURL, dbName, stopDB, err := database(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopDB()
	if err := migrations.Apply(dbURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := pgstore.New(pool)
	keys, err := seed(ctx, store, filepath.Join(cfg.Dir, "keys.json"))
	if err != nil {
		return fmt.Errorf("devstack: demo tenant: %w", err)
	}

	base := "http://" + ln.Addr().String()

	// Decision events go to Kafka, or the embedded broker.
	brokers, kafkaName, closeKafka, err := kafkaOrEmbedded(cfg)
	if err != nil {
		return err
	}
	defer closeKafka()
	embedded := strings.HasPrefix(kafkaName, "embedded")
	var dialer *kafka.Dialer
	if sec := cfg.KafkaSec; sec != nil && !embedded {
		if dialer, err = sec.Dialer(); err != nil {
			return err
		}
	}

	// The decider, following the control plane over loopback: the same
	// assembly as the dataplane binary's, with the dev stack's settings.
	reg := telemetry.NewRegistry()
	dcfg := dataplane.DefaultSettings()
	dcfg.ControlPlane, dcfg.DeciderKey, dcfg.Name, dcfg.ConfigRepull = base, keys.Decider, "dev", 10*time.Second
	dcfg.Region = cfg.Region
	dcfg.StateFile = filepath.Join(cfg.Dir, "decider-snapshot.pb")
	dcfg.RedisURL, dcfg.RedisCluster, dcfg.RedisSentinel, dcfg.RedisPrefix = redisURL(ctx, cfg)
	dcfg.KafkaBrokers, dcfg.Kafka, dcfg.EventsTopic, dcfg.EventsDeltaInterval = strings.Join(brokers, ","), cfg.KafkaSec, cfg.EventsTopic, cfg.DeltaInterval
	if embedded { // the embedded broker lives and dies with this process: nothing to keep for it
		dcfg.EventsSpool, dcfg.Kafka = "off", nil
	}
	dcfg.Budget = cmp.Or(cfg.Budget, dcfg.Budget)
	dcfg.RateLimitHeaders, dcfg.Registry, dcfg.Tracer, dcfg.Logger = cfg.Headers.String(), reg, cfg.Tracer, cfg.Logger
	engineName := "in-process engine"
	if dcfg.RedisURL != "" {
		engineName = "Redis " + redact.URL(dcfg.RedisURL)
	}
	dec, err := dataplane.New(ctx, dcfg)
	if err != nil {
		return err
	}
	defer dec.Close() // after the server: the publisher's last flush, then Kafka closes
	syncer := dec.Follower

	// The analytics consumer rolling the events up.
	consumer := analytics.NewConsumer(analytics.Config{Brokers: brokers, Topic: cfg.EventsTopic, Dialer: dialer,
		Store: analytics.NewStore(pool, 0), Registerer: reg, Logger: cfg.Logger})
	var background sync.WaitGroup
	defer background.Wait()
	bctx, stopBackground := context.WithCancel(ctx)
	defer stopBackground()
	background.Go(func() { _ = consumer.Run(bctx) })
	background.Go(func() {
		prune.Loop(bctx, store.PruneOverrides, pgstore.DefaultOverrideRetention, time.Hour, time.Now, cfg.Logger, "expired overrides")
	})

	mux := http.NewServeMux()
	telemetry.Mount(mux, reg, syncer.Ready, func() any { return map[string]any{"config_versions": syncer.Versions()} })
	dec.Mount(mux)
	// The control plane takes every path not routed above (its sluice.v1 services).
	closing := make(chan struct{})
	mux.Handle("/", controlplane.NewHandler(controlplane.HandlerConfig{OperatorKey: keys.Operator, Registerer: reg, Tracer: cfg.Tracer,
		DeciderKey: keys.Decider, Closing: closing, Logger: cfg.Logger, AuthFailures: 30, KeyCalls: 6000,
		Console: web.Options{TryKeys: map[string]string{keys.Admin: keys.Check, keys.Viewer: keys.Check}}}.OnPostgres(store, 5*time.Second)))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute, Protocols: new(http.Protocols)}
	srv.RegisterOnShutdown(func() { close(closing) })
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)

	// grpc-go's listener: Envoy's rate limit service and DecisionService.
	gs := grpcserve.NewServer(dec.Service)
	dataplane.RegisterGRPC(gs, dec.Service)
	defer grpcserve.ServeHealth(gs, syncer.Loaded(), dataplane.GRPCServices...)()
	go func() { _ = gs.Serve(gln) }()
	defer gs.Stop()

	errc := make(chan error, 1)
	// A grace past 6 s: Shutdown waits for a connection that has sent no
	// request (the decider's watch reconnecting as it stops, say) until it
	// is 5 s old, counted in whole seconds.
	go func() { errc <- telemetry.Serve(ctx, srv, ln, 10*time.Second) }()
	// The banner promises a working curl line: wait for the decider's
	// first config (it comes over loopback from the control plane above).
	for deadline := time.Now().Add(15 * time.Second); !syncer.Ready(); {
		select {
		case err := <-errc:
			return err
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("devstack: the decider never loaded its configuration")
		}
	}
	fmt.Fprintf(cfg.Out, `Sluice dev is running: control plane, decider (%s) and analytics (%s), PostgreSQL %s, tenant "demo".
  console       %[4]s/console/
  API           %[4]s  (/v1/check, /shouldAllowRequest, Unkey's /v2/ratelimit.limit, gubernator's /v1/GetRateLimits, sluice.v1 Connect/gRPC, /healthz, /readyz, /metrics)
  gRPC          %[8]s  (Envoy rate limit service, DecisionService, gubernator's V1 on grpc-go)
  operator key  %[5]s
  admin key     %[6]s  (tenant demo)
  check key     %[7]s
  viewer key    %[9]s  (read only: an analyst's console)
  try           curl -s -X POST %[4]s/v1/check -H 'Authorization: Bearer %[7]s' -d '{"descriptors":{"client_id":"alice"}}'
%[10]s
  export        export SLUICE_SERVER=%[4]s SLUICE_DECIDER=%[4]s SLUICE_CHECK_KEY=%[7]s SLUICE_KEY=%[6]s SLUICE_OPERATOR_KEY=%[5]s
Ctrl-C stops it; sluice dev -reset starts again from a clean demo.
`, engineName, kafkaName, dbName, base, keys.Operator, keys.Admin, keys.Check, gln.Addr(), keys.Viewer, cliLines(base))
	return <-errc
}

// cliLines says how to run the CLI against a dev stack at base: on the
// CLI's default address, with no variables (it reads the dev keys
// itself); elsewhere, after the banner's export line.
func cliLines(base string) string {
	const run = "bin/sluice rules list; bin/sluice check client_id=alice; bin/sluice reports top"
	if base == "http://127.0.0.1:8080" {
		return "  cli           " + run + "\n                (the CLI finds this address and the dev keys itself)"
	}
	return "  cli           " + run + "\n                (after the export line below)"
}

// database returns the URL to use and what to call at exit: u if it
// answers, else the local server's sluice_dev database (created if
// missing), else a private cluster started in the dev directory. An unset
// u skips the first step; a set one that does not answer skips the local
// server too (it was not the one asked for).
func database(ctx context.Context, cfg Config) (string, string, func(), error) {
	if cfg.DatabaseURL != "" {
		if pingDB(ctx, cfg.DatabaseURL) == nil {
			return cfg.DatabaseURL, redact.URL(cfg.DatabaseURL), func() {}, nil
		}
		cfg.Logger.WarnContext(ctx, "devstack: DATABASE_URL does not answer; starting a private PostgreSQL", "url", redact.URL(cfg.DatabaseURL))
	} else if pingDB(ctx, LocalDatabase) == nil {
		u, err := devDatabase(ctx, LocalDatabase, cfg.Reset)
		return u, redact.URL(u), func() {}, err
	}
	dir := privateDir(cfg.Dir)
	base, stop, err := privatePostgres(dir)
	if err != nil {
		return "", "", nil, err
	}
	u, err := devDatabase(ctx, base, cfg.Reset)
	if err != nil {
		stop()
		return "", "", nil, err
	}
	return u, "private cluster in " + dir, stop, nil
}

func pingDB(ctx context.Context, u string) error {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, u)
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// devDatabase returns the URL of the sluice_dev database on the server at
// base, creating the database if it is missing, or afresh if reset.
func devDatabase(ctx context.Context, base string, reset bool) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, base)
	if err != nil {
		return "", fmt.Errorf("devstack: PostgreSQL at %s: %w", redact.URL(base), err)
	}
	defer conn.Close(ctx)
	if reset {
		if _, err := conn.Exec(cctx, `DROP DATABASE IF EXISTS sluice_dev WITH (FORCE)`); err != nil {
			return "", fmt.Errorf("devstack: reset: drop database sluice_dev: %w", err)
		}
	}
	var exists bool
	if err := conn.QueryRow(cctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'sluice_dev')`).Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := conn.Exec(cctx, `CREATE DATABASE sluice_dev`); err != nil {
			return "", fmt.Errorf("devstack: create database sluice_dev: %w", err)
		}
	}
	p, _ := url.Parse(base)
	p.Path = "/sluice_dev"
	return p.String(), nil
}

// redisURL returns the Redis the decider is to use: cfg.RedisURL, else
// the local server, whichever answers within 2 s; none ("") decides in
// process.
func redisURL(ctx context.Context, cfg Config) (url string, cluster, sentinel bool, prefix string) {
	u := cfg.RedisURL
	if u == "" {
		u = LocalRedis
	}
	cluster, sentinel = cfg.RedisCluster && cfg.RedisURL != "", cfg.RedisSentinel && cfg.RedisURL != ""
	if !cluster && !sentinel {
		// One server: ask its port first, so that none there is one line
		// of ours, not the Redis client's retries.
		if o, err := redis.ParseURL(u); err == nil && o.Network == "tcp" {
			conn, err := net.DialTimeout("tcp", o.Addr, time.Second)
			if err != nil {
				cfg.Logger.InfoContext(ctx, "devstack: no Redis answers; deciding in process (set REDIS_URL to use one)", "redis", redact.URL(u))
				return "", false, false, ""
			}
			_ = conn.Close()
		}
	}
	eng, err := redisengine.Open(u, redisengine.ClientOptions{Cluster: cluster, Sentinel: sentinel}, redisengine.Config{Prefix: cfg.RedisPrefix})
	if err != nil {
		cfg.Logger.WarnContext(ctx, "devstack: bad REDIS_URL; deciding in process", "err", err)
		return "", false, false, ""
	}
	defer eng.Close()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := eng.Preload(pctx); err != nil {
		cfg.Logger.InfoContext(ctx, "devstack: no Redis; deciding in process", "redis", redact.URL(u))
		return "", false, false, ""
	}
	return u, cluster, sentinel, cfg.RedisPrefix
}

// kafkaOrEmbedded returns the brokers to use: cfg.KafkaBrokers if one
// answers, else an embedded kfake broker keeping its data in cfg.Dir/kafka,
// so events survive a restart of sluice dev.
func kafkaOrEmbedded(cfg Config) ([]string, string, func(), error) {
	if cfg.KafkaBrokers != "" {
		brokers := strings.Split(cfg.KafkaBrokers, ",")
		if slices.ContainsFunc(brokers, reachable) {
			return brokers, "Kafka " + cfg.KafkaBrokers, func() {}, nil
		}
		cfg.Logger.Warn("devstack: no broker of KAFKA_BROKERS answers; using an embedded one", "brokers", cfg.KafkaBrokers)
	}
	dir := filepath.Join(cfg.Dir, "kafka")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", nil, err
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, cfg.EventsTopic), kfake.DataDir(dir))
	if err != nil {
		return nil, "", nil, fmt.Errorf("devstack: embedded Kafka: %w", err)
	}
	addrs := c.ListenAddrs()
	return addrs, "embedded Kafka " + strings.Join(addrs, ","), c.Close, nil
}

// seed creates the demo tenant on first run (tiers free and pro, a few
// rules, an admin, a check and a viewer key) and returns the dev keys, kept
// in path.
func seed(ctx context.Context, s *pgstore.Store, path string) (devKeys, error) {
	var k devKeys
	if b, err := os.ReadFile(path); err == nil {
		if json.Unmarshal(b, &k) == nil && k.Check != "" {
			if key, err := s.KeyByHash(ctx, policy.HashKey(k.Check)); err == nil {
				if k.Viewer != "" {
					return k, nil // a previous run's tenant, still there
				}
				return k, newViewerKey(ctx, s, key.TenantID, &k, path) // one of before viewer keys
			}
		}
	}
	k.Operator, k.Decider = secret("sk_operator_"), secret("sk_decider_")
	const op = policy.Actor("operator")
	if t, _, err := s.GetTenantBySlug(ctx, "demo"); err == nil {
		// The demo tenant of another dev directory: keep it, with new keys.
		return k, newDemoKeys(ctx, s, t.ID, &k, path)
	}
	t, err := s.CreateTenant(ctx, op, policy.Tenant{Slug: "demo", Name: "Demo", DefaultTier: "free"})
	if err != nil {
		return k, err
	}
	perMinute := func(alg policy.Algorithm, n int64) policy.Params {
		return policy.Params{Algorithm: alg, Limit: n, Window: time.Minute}
	}
	tiers, err := s.ListTiers(ctx, t.ID)
	if err != nil {
		return k, err
	}
	pro, _, err := s.CreateTier(ctx, op, t.ID, "pro")
	if err != nil {
		return k, err
	}
	for _, r := range []struct {
		tier string
		rule policy.Rule
	}{
		{tiers[0].ID, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true, Params: perMinute(policy.TokenBucket, 10)}},
		{tiers[0].ID, policy.Rule{Name: "login", KeyBy: []string{"client_id"}, Enabled: true,
			Match: []policy.Match{{Key: "route", Value: "/login"}}, Params: perMinute(policy.SlidingWindow, 5)}},
		{pro.ID, policy.Rule{Name: "per-client", KeyBy: []string{"client_id"}, Enabled: true, Params: perMinute(policy.TokenBucket, 100)}},
	} {
		if _, _, err := s.CreateRule(ctx, op, t.ID, r.tier, r.rule); err != nil {
			return k, err
		}
	}
	return k, newDemoKeys(ctx, s, t.ID, &k, path)
}

// newDemoKeys creates an admin, a check and a viewer key for the demo
// tenant and keeps all of k in path.
func newDemoKeys(ctx context.Context, s *pgstore.Store, tenant string, k *devKeys, path string) error {
	var err error
	if k.Admin, _, err = s.CreateKey(ctx, "operator", tenant, policy.KeyAdmin, "dev admin"); err != nil {
		return err
	}
	if k.Check, _, err = s.CreateKey(ctx, "operator", tenant, policy.KeyCheck, "dev check"); err != nil {
		return err
	}
	return newViewerKey(ctx, s, tenant, k, path)
}

// newViewerKey creates a viewer key (an analyst's, read only) for the demo
// tenant and keeps all of k in path.
func newViewerKey(ctx context.Context, s *pgstore.Store, tenant string, k *devKeys, path string) error {
	var err error
	if k.Viewer, _, err = s.CreateKey(ctx, "operator", tenant, policy.KeyViewer, "dev viewer"); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(k, "", "  ")
	return atomicfile.WriteFile(path, b, 0o600)
}

// secret returns a random secret with prefix.
func secret(prefix string) string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
