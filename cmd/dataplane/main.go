// Command dataplane is a Sluice decider: it follows the control plane's
// configuration, decides checks against Redis (or, without Redis, its own
// memory), and serves the HTTP check API with /healthz, /readyz and /metrics.
//
// Configuration (flags override the environment):
//
//	-addr           SLUICE_DATAPLANE_ADDR     listen address of the check APIs, /healthz and /readyz (default 127.0.0.1:8080)
//	-admin-addr     SLUICE_ADMIN_ADDR         listen address of /metrics and detailed health (/readyz with the config versions enforced), plaintext, for operators alone; "off" none (default 127.0.0.1:9080)
//	-tls-cert       SLUICE_DATAPLANE_TLS_CERT PEM certificate: with -tls-key the HTTP port serves HTTPS (HTTP/2 and HTTP/1.1), the pair reread when the files change (default none: plaintext)
//	-tls-key        SLUICE_DATAPLANE_TLS_KEY  PEM private key of -tls-cert
//	-tls-client-ca  SLUICE_DATAPLANE_TLS_CLIENT_CA PEM CA bundle: HTTP clients must present a certificate it signed (mutual TLS; default none)
//	-control-plane  SLUICE_CONTROL_PLANE_URL  control plane URL, http:// or https:// (default http://127.0.0.1:8081; a private CA's certificate via SSL_CERT_FILE)
//	-redis-url      REDIS_URL                 redis://, rediss:// or unix:// URL; empty decides in this process only
//	-redis-cluster  SLUICE_REDIS_CLUSTER      the URL's host and addr parameters are a Redis Cluster's seed nodes (default false)
//	-redis-sentinel SLUICE_REDIS_SENTINEL     the URL's host and addr parameters are Sentinels, its master_name the master they watch (default false)
//	-redis-spin     SLUICE_REDIS_SPIN         how long a read waiting for Redis polls before it sleeps, at low load (default 200µs; 0 never)
//	-redis-prefix   SLUICE_REDIS_PREFIX       prefix of every counter key (default none)
//	-redis-batch    SLUICE_REDIS_BATCH        coalesce concurrent decisions into pipelines (default true)
//	-state-file     SLUICE_STATE_FILE         last-known-good config (default <user cache dir>/sluice/decider-snapshot.pb)
//	-kafka-brokers  KAFKA_BROKERS             comma-separated brokers for decision events; empty sends none
//	-events-topic   SLUICE_EVENTS_TOPIC       topic of decision events (default sluice.decisions)
//	-events-spool   SLUICE_EVENTS_SPOOL       directory keeping on disk the events Kafka did not take (an outage, or the last flush at shutdown), sent first when it returns, also by the next run (default events-spool beside -state-file; "off" none)
//	-events-spool-mb SLUICE_EVENTS_SPOOL_MB   bound of the events spool in MiB; past it events wait in memory up to the buffer, then are dropped and counted (default 256)
//	-kafka-tls      KAFKA_TLS                 connect to Kafka over TLS, verified against the system's roots (default false)
//	-kafka-tls-ca   KAFKA_TLS_CA              PEM CA bundle verifying the brokers (implies -kafka-tls)
//	-kafka-tls-cert KAFKA_TLS_CERT            PEM client certificate for Kafka (implies -kafka-tls)
//	-kafka-tls-key  KAFKA_TLS_KEY             PEM private key of -kafka-tls-cert
//	-kafka-sasl     KAFKA_SASL_MECHANISM      SASL mechanism: plain, scram-sha-256 or scram-sha-512 (default none)
//	-kafka-sasl-username KAFKA_SASL_USERNAME  SASL user name
//	                KAFKA_SASL_PASSWORD       SASL password (the environment only: no flag shows it in a process listing)
//	-auth-failures  SLUICE_AUTH_FAILURES      invalid check keys one address (an IPv6 caller's /64) may send a minute, as many at once, before its calls are refused with 429 / resource_exhausted until it is back under; 0 unlimited (default 30)
//	-budget         SLUICE_DECISION_BUDGET    longest a decision may wait in the decider to be sent to Redis; past it, overload (default 50ms)
//	-redis-timeout  SLUICE_REDIS_TIMEOUT      longest Redis may take to answer, from the moment a pipeline is written; past it, Redis has failed (default 500ms)
//	-max-in-flight  SLUICE_MAX_IN_FLIGHT      decisions waiting on Redis at once, shared fairly between tenants; beyond, overload (default 512; 0 no bound)
//	-overload-policy SLUICE_OVERLOAD_POLICY   what answers a decision overload keeps from Redis: local (the in-process engine at -local-share), failure_mode (each rule's) or reject (default local)
//	-local-share    SLUICE_LOCAL_SHARE        share of a limit enforced locally while Redis fails or the decider is overloaded (default 1)
//	-sync-max-keys  SLUICE_SYNC_MAX_KEYS      keys counted locally at once for rules with a sync interval, ~200 B each (default 262144)
//	-grpc-addr      SLUICE_GRPC_ADDR          grpc-go listener: Envoy's rate limit service, sluice.v1.DecisionService and gubernator's V1 (default 127.0.0.1:8089; "off" disables)
//	-grpc-max-connection-age SLUICE_GRPC_MAX_CONNECTION_AGE gRPC connections are closed gracefully after this long, so clients spread over new deciders (default 0: never)
//	-grpc-max-connection-age-grace SLUICE_GRPC_MAX_CONNECTION_AGE_GRACE how long calls in flight on such a connection may finish (default 30s)
//	-grpc-tls-cert  SLUICE_GRPC_TLS_CERT      PEM certificate: with -grpc-tls-key the gRPC port serves TLS, the pair reread when the files change (default none: plaintext)
//	-grpc-tls-key   SLUICE_GRPC_TLS_KEY       PEM private key of -grpc-tls-cert
//	-grpc-tls-client-ca SLUICE_GRPC_TLS_CLIENT_CA PEM CA bundle: gRPC clients must present a certificate it signed (mutual TLS; default none)
//	-rule-metrics   SLUICE_RULE_METRICS       count each rule's answers in /metrics: sluice_rule_decisions_total and sluice_rule_near_limit_total, a series per tenant, tier, rule (and outcome) (default true)
//	-shadow-mode    SLUICE_SHADOW_MODE        every rule of every tenant in shadow: decisions reported as ever, none rejected (default false)
//	-rate-limit-headers SLUICE_RATE_LIMIT_HEADERS the rate limit headers answered: ietf, draft-6, x, none or kong (default ietf; docs/configuration.md)
//	-cors-origins   SLUICE_CORS_ORIGINS       origins whose browsers may call /v1/check, e.g. the console's (default none)
//	-upstream       SLUICE_UPSTREAM           reverse-proxy mode: the URL requests are forwarded to when allowed (default none: off)
//	-forward-auth   SLUICE_FORWARD_AUTH       the proxy port answers as a gateway's forward-auth service (Traefik forwardAuth, Caddy forward_auth): 200 or 429 with the headers, the request's path and method from X-Forwarded-Uri and X-Forwarded-Method; instead of -upstream (default false)
//	-forward-auth-deny-status SLUICE_FORWARD_AUTH_DENY_STATUS the status of a forward-auth rejection: 429, or 403 for nginx's auth_request (default 429)
//	-proxy-addr     SLUICE_PROXY_ADDR         listen address of the reverse proxy (default 127.0.0.1:8000)
//	-proxy-tls-cert SLUICE_PROXY_TLS_CERT     proxy: PEM certificate; with -proxy-tls-key the proxy serves HTTPS, the pair reread when the files change (default none: plaintext)
//	-proxy-tls-key  SLUICE_PROXY_TLS_KEY      proxy: PEM private key of -proxy-tls-cert
//	-proxy-tls-client-ca SLUICE_PROXY_TLS_CLIENT_CA proxy: PEM CA bundle: clients must present a certificate it signed (mutual TLS; default none)
//	-identity-client-cert SLUICE_IDENTITY_CLIENT_CERT proxy: name the client by its verified certificate (first URI SAN such as a SPIFFE ID, else DNS name, e-mail, common name); needs -proxy-tls-client-ca (default false)
//	                SLUICE_PROXY_KEY          the check key of the tenant the proxy enforces; environment only
//	-identity-header SLUICE_IDENTITY_HEADER   proxy: header naming the client (else the cookie, else the client IP)
//	-identity-cookie SLUICE_IDENTITY_COOKIE   proxy: cookie naming the client
//	-identity-jwt-claim SLUICE_IDENTITY_JWT_CLAIM proxy: claim naming the client (e.g. sub) in the bearer token (Authorization), believed once the token verifies against -identity-jwks-url; before the header and the cookie (default none)
//	-identity-jwks-url SLUICE_IDENTITY_JWKS_URL proxy: the identity provider's JSON Web Key Set, read at start, hourly and on an unknown key id
//	-identity-jwt-issuer SLUICE_IDENTITY_JWT_ISSUER proxy: the issuer (iss) a token must name (default any)
//	-identity-jwt-audience SLUICE_IDENTITY_JWT_AUDIENCE proxy: an audience (aud) a token must name (default any)
//	-trusted-proxies SLUICE_TRUSTED_PROXIES   proxy: comma-separated CIDRs whose X-Forwarded-For is believed
//	-ipv6-prefix     SLUICE_IPV6_PREFIX       proxy: leading bits of an IPv6 client's address that name it (64; 128: the address)
//	-proxy-protocol SLUICE_PROXY_PROTOCOL     proxy: comma-separated CIDRs of load balancers (TCP, layer 4) that open each connection with a PROXY protocol header, v1 or v2, whose source address is then the client's; their connections without one are refused, others' served as they come (default none)
//	-tier-header    SLUICE_TIER_HEADER        proxy: header choosing the tier, believed from -trusted-proxies only (default none)
//	-descriptor-headers SLUICE_DESCRIPTOR_HEADERS proxy: comma-separated descriptor=Header pairs: each request's header, when present, is that descriptor, for rules to match and key by (e.g. org=X-Org-Id, site=Host; default none)
//	-max-delay      SLUICE_MAX_DELAY          proxy: longest a leaky-bucket request is held before forwarding (default 5s)
//	-upstream-timeout SLUICE_UPSTREAM_TIMEOUT proxy: longest wait for the upstream's response headers, then 504 (default 60s; 0 none)
//	-preserve-host  SLUICE_PRESERVE_HOST      proxy: forward the client's Host header, not the upstream's (default false)
//	-fold-routes    SLUICE_FOLD_ROUTES        proxy: the route descriptor in lower case without a trailing slash, for upstreams that ignore both (default false)
//	                SLUICE_DECIDER_KEY        the decider credential, or a tenant's check key (the decider then serves that tenant alone); environment only
//	                SLUICE_DECIDER_KEY_FILE   a file holding it instead, reread when it changes (a rotation without a restart)
//
// With OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// set, each decision is a span ("sluice.decide") in the trace of the
// request it decides, exported over OTLP/HTTP (internal/tracing; also
// OTEL_EXPORTER_OTLP_HEADERS, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG,
// OTEL_SERVICE_NAME).
//
// Every secret variable (SLUICE_DECIDER_KEY, SLUICE_PROXY_KEY,
// KAFKA_SASL_PASSWORD, REDIS_URL) may instead be read from the file its
// NAME_FILE variable names: Docker's and Kubernetes' secrets.
//
// Unless GOGC or GOMEMLIMIT is set, the decider runs its garbage collector
// at GOGC=400 with a 128 MiB heap floor under a 1 GiB soft memory limit
// (see dataplane.TuneGC). GOMAXPROCS=1 may serve more decisions on a small
// machine the decider shares with Redis (docs/operations.md, "Scaling").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/dataplane"
	"github.com/sluicehq/sluice/internal/decide"
	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/gen/sluice/v1/sluicev1connect"
	"github.com/sluicehq/sluice/internal/kafkasec"
	"github.com/sluicehq/sluice/internal/limit"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/redisengine"
	"github.com/sluicehq/sluice/internal/rlheaders"
	"github.com/sluicehq/sluice/internal/secretfile"
	"github.com/sluicehq/sluice/internal/spool"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/tlsfiles"
	"github.com/sluicehq/sluice/internal/tracing"
)

func main() {
	dataplane.TuneGC(os.Getenv)
	flagenv.Main("dataplane", run)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	// What run starts stops when it returns, an error at start included.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e := flagenv.NewEnv(getenv)
	env := e.String
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	fs := flag.NewFlagSet("dataplane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", env("SLUICE_DATAPLANE_ADDR", "127.0.0.1:8080"), "listen address of the check APIs, /healthz and /readyz")
	adminAddr := fs.String("admin-addr", env("SLUICE_ADMIN_ADDR", "127.0.0.1:9080"), `listen address of /metrics and detailed health, for operators alone; "off" none`)
	cpURL := fs.String("control-plane", env("SLUICE_CONTROL_PLANE_URL", "http://127.0.0.1:8081"), "control plane URL")
	redisURL := fs.String("redis-url", env("REDIS_URL", ""), "redis:// URL; empty decides in this process only")
	redisCluster := fs.Bool("redis-cluster", e.Bool("SLUICE_REDIS_CLUSTER", false), "the Redis URL names a Redis Cluster: its host and addr parameters are seed nodes")
	redisSentinel := fs.Bool("redis-sentinel", e.Bool("SLUICE_REDIS_SENTINEL", false), "the Redis URL names Sentinels (host and addr parameters) and, as master_name, the master they watch")
	redisSpin := fs.Duration("redis-spin", e.Duration("SLUICE_REDIS_SPIN", redisengine.DefaultSpin), "how long a read waiting for Redis polls before it sleeps; 0 never")
	redisPrefix := fs.String("redis-prefix", env("SLUICE_REDIS_PREFIX", ""), "prefix of every counter key")
	batch := fs.Bool("redis-batch", e.Bool("SLUICE_REDIS_BATCH", true), "coalesce concurrent decisions into pipelines")
	stateFile := fs.String("state-file", env("SLUICE_STATE_FILE", filepath.Join(cache, "sluice", "decider-snapshot.pb")), "last-known-good config")
	brokers := fs.String("kafka-brokers", env("KAFKA_BROKERS", ""), "comma-separated brokers for decision events")
	topic := fs.String("events-topic", env("SLUICE_EVENTS_TOPIC", "sluice.decisions"), "topic of decision events")
	spoolDir := fs.String("events-spool", env("SLUICE_EVENTS_SPOOL", ""), `directory keeping the events Kafka did not take, sent when it returns; default events-spool beside -state-file, "off" none`)
	spoolMB := fs.Int("events-spool-mb", e.Int("SLUICE_EVENTS_SPOOL_MB", 256), "bound of the events spool, in MiB; past it events are dropped and counted")
	kafkaSec := kafkasec.Register(fs, e)
	budget := fs.Duration("budget", e.Duration("SLUICE_DECISION_BUDGET", 50*time.Millisecond), "longest a decision may wait in the decider to be sent to Redis; past it, overload")
	redisTimeout := fs.Duration("redis-timeout", e.Duration("SLUICE_REDIS_TIMEOUT", redisengine.DefaultTimeout), "longest Redis may take to answer, from the moment a pipeline is written; past it, Redis has failed")
	authFailures := fs.Int("auth-failures", e.Int("SLUICE_AUTH_FAILURES", 30), "invalid check keys an address may send a minute before its calls are refused for a while (0: unlimited)")
	maxInFlight := fs.Int("max-in-flight", e.Int("SLUICE_MAX_IN_FLIGHT", decide.DefaultMaxInFlight), "decisions waiting on Redis at once, shared fairly between tenants; beyond, overload (0: no bound)")
	overloadPolicy := fs.String("overload-policy", env("SLUICE_OVERLOAD_POLICY", "local"), "what answers a decision overload keeps from Redis: local, failure_mode or reject")
	share := fs.Float64("local-share", e.Float("SLUICE_LOCAL_SHARE", 1), "share of a limit enforced locally while Redis fails or the decider is overloaded")
	syncKeys := fs.Int("sync-max-keys", e.Int("SLUICE_SYNC_MAX_KEYS", redisengine.DefaultMaxLocalKeys), "keys counted locally at once for rules with a sync interval; beyond, decided in Redis")
	ruleMetrics := fs.Bool("rule-metrics", e.Bool("SLUICE_RULE_METRICS", true), "count each rule's answers in /metrics (series per tenant, tier and rule)")
	shadowMode := fs.Bool("shadow-mode", e.Bool("SLUICE_SHADOW_MODE", false), "every rule of every tenant in shadow: decisions are reported as ever, none rejected")
	headerStyle := fs.String("rate-limit-headers", env("SLUICE_RATE_LIMIT_HEADERS", "ietf"), "the rate limit headers answered: ietf (RateLimit-Policy, RateLimit, X-RateLimit-*), draft-6 (RateLimit-Policy 10;w=60, RateLimit-Limit, -Remaining, -Reset, X-RateLimit-*), x (X-RateLimit-* alone), none (Retry-After alone) or kong (X-RateLimit-Limit-Minute and -Remaining-Minute per rule, RateLimit-Limit, -Remaining, -Reset)")
	corsOrigins := fs.String("cors-origins", env("SLUICE_CORS_ORIGINS", ""), "comma-separated origins whose browsers may call /v1/check (the console's)")
	upstream := fs.String("upstream", env("SLUICE_UPSTREAM", ""), "reverse-proxy mode: forward allowed requests to this URL")
	denyStatus := fs.Int("forward-auth-deny-status", e.Int("SLUICE_FORWARD_AUTH_DENY_STATUS", http.StatusTooManyRequests), "the status of a forward-auth rejection: 429, or 403 for nginx's auth_request")
	forwardAuth := fs.Bool("forward-auth", e.Bool("SLUICE_FORWARD_AUTH", false), "the proxy port answers a gateway's forward-auth calls (200 or 429) instead of forwarding to -upstream")
	proxyAddr := fs.String("proxy-addr", env("SLUICE_PROXY_ADDR", "127.0.0.1:8000"), "listen address of the reverse proxy")
	proxyCert := fs.String("proxy-tls-cert", env("SLUICE_PROXY_TLS_CERT", ""), "proxy: PEM certificate; with -proxy-tls-key the proxy serves HTTPS (reread when the files change)")
	proxyKey := fs.String("proxy-tls-key", env("SLUICE_PROXY_TLS_KEY", ""), "proxy: PEM private key of -proxy-tls-cert")
	proxyClientCA := fs.String("proxy-tls-client-ca", env("SLUICE_PROXY_TLS_CLIENT_CA", ""), "proxy: PEM CA bundle clients' certificates must chain to (mutual TLS)")
	certIdentity := fs.Bool("identity-client-cert", e.Bool("SLUICE_IDENTITY_CLIENT_CERT", false), "proxy: name the client by its verified certificate")
	idHeader := fs.String("identity-header", env("SLUICE_IDENTITY_HEADER", ""), "proxy: header naming the client")
	jwtClaim := fs.String("identity-jwt-claim", env("SLUICE_IDENTITY_JWT_CLAIM", ""), "proxy: claim of a verified bearer token naming the client, e.g. sub")
	jwksURL := fs.String("identity-jwks-url", env("SLUICE_IDENTITY_JWKS_URL", ""), "proxy: the identity provider's JSON Web Key Set URL")
	jwtIssuer := fs.String("identity-jwt-issuer", env("SLUICE_IDENTITY_JWT_ISSUER", ""), "proxy: the issuer a token must name")
	jwtAudience := fs.String("identity-jwt-audience", env("SLUICE_IDENTITY_JWT_AUDIENCE", ""), "proxy: an audience a token must name")
	idCookie := fs.String("identity-cookie", env("SLUICE_IDENTITY_COOKIE", ""), "proxy: cookie naming the client")
	trusted := fs.String("trusted-proxies", env("SLUICE_TRUSTED_PROXIES", ""), "proxy: CIDRs whose X-Forwarded-For is believed")
	ipv6Prefix := fs.Int("ipv6-prefix", e.Int("SLUICE_IPV6_PREFIX", clientip.IPv6Network), "proxy: leading bits of an IPv6 client's address that name it (its ip, and its identity when nothing else names it); 128: the address")
	balancers := fs.String("proxy-protocol", env("SLUICE_PROXY_PROTOCOL", ""), "proxy: CIDRs of load balancers opening each connection with a PROXY protocol header (v1 or v2), whose address is then the client's")
	tierHeader := fs.String("tier-header", env("SLUICE_TIER_HEADER", ""), "proxy: header choosing the tier")
	descHeaders := fs.String("descriptor-headers", env("SLUICE_DESCRIPTOR_HEADERS", ""), "proxy: descriptor=Header pairs, comma-separated: each header a descriptor for rules")
	maxDelay := fs.Duration("max-delay", e.Duration("SLUICE_MAX_DELAY", 5*time.Second), "proxy: longest hold for a leaky-bucket delay")
	preserveHost := fs.Bool("preserve-host", e.Bool("SLUICE_PRESERVE_HOST", false), "proxy: forward the client's Host header, not the upstream's")
	foldRoutes := fs.Bool("fold-routes", e.Bool("SLUICE_FOLD_ROUTES", false), "proxy: the route descriptor in lower case without a trailing slash (rules name routes so), for upstreams that serve /Login/ as /login")
	upstreamTimeout := fs.Duration("upstream-timeout", e.Duration("SLUICE_UPSTREAM_TIMEOUT", dataplane.DefaultUpstreamTimeout), "proxy: longest wait for the upstream's response headers, then 504 (0 none)")
	grpcAddr := fs.String("grpc-addr", env("SLUICE_GRPC_ADDR", "127.0.0.1:8089"), `grpc-go listener (Envoy RLS, DecisionService, gubernator's V1); "off" disables`)
	grpcMaxAge := fs.Duration("grpc-max-connection-age", e.Duration("SLUICE_GRPC_MAX_CONNECTION_AGE", 0), "gRPC connections are closed gracefully after this long, so clients spread over new deciders; 0 never")
	grpcMaxAgeGrace := fs.Duration("grpc-max-connection-age-grace", e.Duration("SLUICE_GRPC_MAX_CONNECTION_AGE_GRACE", 30*time.Second), "how long calls in flight on such a connection may finish")
	tlsCert := fs.String("tls-cert", env("SLUICE_DATAPLANE_TLS_CERT", ""), "PEM certificate: with -tls-key the HTTP port serves HTTPS (reread when the files change)")
	tlsKey := fs.String("tls-key", env("SLUICE_DATAPLANE_TLS_KEY", ""), "PEM private key of -tls-cert")
	tlsClientCA := fs.String("tls-client-ca", env("SLUICE_DATAPLANE_TLS_CLIENT_CA", ""), "PEM CA bundle: HTTP clients must present a certificate it signed (mutual TLS)")
	grpcCert := fs.String("grpc-tls-cert", env("SLUICE_GRPC_TLS_CERT", ""), "PEM certificate: with -grpc-tls-key the gRPC port serves TLS (reread when the files change)")
	grpcKey := fs.String("grpc-tls-key", env("SLUICE_GRPC_TLS_KEY", ""), "PEM private key of -grpc-tls-cert")
	grpcClientCA := fs.String("grpc-tls-client-ca", env("SLUICE_GRPC_TLS_CLIENT_CA", ""), "PEM CA bundle: gRPC clients must present a certificate it signed (mutual TLS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := e.Err(); err != nil { // a variable that does not parse stops the binary, named
		return err
	}
	headers, err := rlheaders.ParseStyle(*headerStyle)
	if err != nil {
		return err
	}
	overload, err := decide.ParseOverloadPolicy(*overloadPolicy)
	if err != nil {
		return fmt.Errorf("-overload-policy (SLUICE_OVERLOAD_POLICY): %w", err)
	}
	switch {
	case *budget <= 0:
		return fmt.Errorf("-budget (SLUICE_DECISION_BUDGET) %v: want more than 0", *budget)
	case *redisTimeout <= 0:
		return fmt.Errorf("-redis-timeout (SLUICE_REDIS_TIMEOUT) %v: want more than 0", *redisTimeout)
	case *maxInFlight < 0:
		return fmt.Errorf("-max-in-flight (SLUICE_MAX_IN_FLIGHT) %d: want 0 (no bound) or more", *maxInFlight)
	case *share <= 0 || *share > 1:
		return fmt.Errorf("-local-share (SLUICE_LOCAL_SHARE) %v: want more than 0, at most 1", *share)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	if err := os.MkdirAll(filepath.Dir(*stateFile), 0o700); err != nil {
		return err
	}

	deciderKey, err := secretfile.FromEnv(getenv, "SLUICE_DECIDER_KEY")
	if err != nil {
		return err
	}
	keys := dataplane.NewKeys()
	health := &dataplane.Health{}
	var metrics atomic.Pointer[dataplane.Metrics] // set once the decider is built; nothing recorded before
	syncer := dataplane.NewSyncer(dataplane.SyncConfig{
		Client: sluicev1connect.NewConfigServiceClient(http.DefaultClient, *cpURL), HealthFunc: health.Report,
		Key: getenv("SLUICE_DECIDER_KEY"), KeyFunc: deciderKey, Keys: keys, StateFile: *stateFile, Logger: logger, Name: deciderName(), ShadowAll: *shadowMode,
		OnChange: func(old, next *decide.Config) { metrics.Load().Forget(old, next) },
	})
	// Every return waits for the syncer, so that its last state file is
	// written before the process exits (or a test removes its directory).
	syncCtx, stopSync := context.WithCancel(ctx)
	synced := make(chan struct{})
	go func() { _ = syncer.Run(syncCtx); close(synced) }()
	defer func() { stopSync(); <-synced }()

	local := limit.NewEngine(limit.EngineConfig{})
	stopSweep := make(chan struct{})
	defer close(stopSweep)
	go local.RunSweeper(stopSweep, 10*time.Second, time.Now)
	opts := decide.Options{Engine: decide.LocalEngine{Engine: local, Now: time.Now}}
	var redisEngine *redisengine.Engine
	if *redisURL != "" {
		eng, err := redisengine.Open(*redisURL, redisengine.ClientOptions{Cluster: *redisCluster, Sentinel: *redisSentinel, Spin: *redisSpin},
			redisengine.Config{Prefix: *redisPrefix, Batch: *batch, MaxLocalKeys: *syncKeys, Timeout: *redisTimeout})
		if err != nil {
			return fmt.Errorf("REDIS_URL: %w", err)
		}
		defer func() { // after the servers have stopped (deferred after this)
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			eng.Shutdown(sctx) // and closes the client
		}()
		redisEngine = eng
		if err := eng.Preload(ctx); err != nil {
			logger.WarnContext(ctx, "redis unreachable at start; rules follow their failure modes", "err", err)
		}
		go eng.WatchEviction(ctx, 5*time.Minute, logger) // sluice_redis_evicting_nodes
		opts = decide.Options{Engine: eng, Local: local, LocalShare: *share, Budget: *budget,
			BreakerFailures: 5, BreakerCooldown: time.Second, DenyCacheSize: 100_000,
			MaxInFlight: *maxInFlight, Overload: overload, Logger: logger}
	}
	decider := decide.NewDecider(opts)
	health.SetDecider(decider, redisEngine != nil)
	if redisEngine != nil { // resets made by other deciders
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		go redisEngine.WatchResets(wctx, decider.Forget, logger, nil)
	}

	reg := telemetry.NewRegistry()
	reg.MustRegister(append(telemetry.ConfigMetrics(syncer), telemetry.NewEngineCollector(local))...)
	if redisEngine != nil {
		reg.MustRegister(telemetry.RedisEngineMetrics(redisEngine)...)
	}
	// The port every tenant's applications reach tells nothing of tenants:
	// metrics and the versions enforced are the admin listener's.
	mux := http.NewServeMux()
	telemetry.MountPublic(mux, syncer.Ready)
	admin := http.NewServeMux()
	telemetry.Mount(admin, reg, syncer.Ready, func() any { return map[string]any{"config_versions": syncer.Versions()} })
	adminAt, stopAdmin, err := telemetry.ServeAdmin(ctx, *adminAddr, admin)
	if err != nil {
		return err
	}
	defer stopAdmin()
	apiCfg := dataplane.HTTPConfig{Decider: decider, Authenticate: keys.Authenticate, Logger: logger,
		Metrics: dataplane.NewMetrics(reg, decider), Headers: headers, KeyGuard: dataplane.NewKeyGuard(*authFailures, logger, reg)}
	apiCfg.Metrics.PerRule(*ruleMetrics)
	metrics.Store(apiCfg.Metrics)
	tracer, stopTracing, err := tracing.Setup(ctx, "sluice-dataplane", getenv)
	if err != nil {
		return err
	}
	defer stopTracing()
	apiCfg.Tracer = tracer
	if *brokers != "" {
		transport, err := kafkaSec.Transport()
		if err != nil {
			return err
		}
		pcfg := events.Config{Brokers: strings.Split(*brokers, ","), Topic: *topic, Transport: transport,
			Decider: deciderName(), Logger: logger}
		if pcfg.Spool, err = openSpool(ctx, logger, *spoolDir, *stateFile, *spoolMB); err != nil {
			return err
		}
		pub := events.NewPublisher(pcfg)
		health.SetEvents(pub)
		// The publisher outlives the servers: its last flush, after they
		// have stopped, carries the events and counts of their last
		// decisions, and the process exits only after it.
		pctx, stopEvents := context.WithCancel(context.WithoutCancel(ctx))
		published := make(chan struct{})
		go func() { defer close(published); _ = pub.Run(pctx) }()
		defer func() { stopEvents(); <-published }()
		reg.MustRegister(telemetry.PublisherMetrics(pub)...)
		apiCfg.Events = pub
	}
	api := dataplane.CORS(flagenv.List(*corsOrigins), dataplane.NewHTTPHandler(apiCfg))
	dataplane.MountHTTP(mux, api)
	mux.Handle(dataplane.NewDecisionService(apiCfg))

	ln, scheme, err := tlsfiles.Listen(*addr, *tlsCert, *tlsKey, *tlsClientCA)
	if err != nil {
		return err
	}
	// The check routes on fasthttp, everything else (and browsers' checks,
	// for CORS) through mux; HTTP/2 for gRPC and Connect checks (with TLS,
	// the connections that chose h2 by ALPN).
	srv := dataplane.NewHTTPServer(apiCfg, mux)
	fmt.Fprintf(stdout, "decider listening on %s://%s\n", scheme, ln.Addr())
	if adminAt != "" {
		fmt.Fprintf(stdout, "admin (metrics, detailed health) on http://%s\n", adminAt)
	}
	if *upstream != "" && *forwardAuth {
		ln.Close()
		return errors.New("-forward-auth answers in place of forwarding: give -upstream or -forward-auth, not both")
	}
	if *upstream != "" || *forwardAuth {
		pc := dataplane.ProxyConfig{IdentityHeader: *idHeader, IdentityCookie: *idCookie, TierHeader: *tierHeader, MaxDelay: *maxDelay,
			ClientCertIdentity: *certIdentity, IPv6Prefix: *ipv6Prefix, UpstreamTimeout: *upstreamTimeout, PreserveHost: *preserveHost,
			ForwardAuth: *forwardAuth, DenyStatus: *denyStatus, FoldRoutes: *foldRoutes}
		if *denyStatus != http.StatusTooManyRequests && *denyStatus != http.StatusForbidden {
			ln.Close()
			return fmt.Errorf("-forward-auth-deny-status %d: want 429, or 403 for nginx", *denyStatus)
		}
		switch {
		case *upstreamTimeout < 0:
			ln.Close()
			return fmt.Errorf("-upstream-timeout %v: want 0 (none) or more", *upstreamTimeout)
		case *upstreamTimeout == 0:
			pc.UpstreamTimeout = -1 // the flag's 0 is "no bound"
		}
		if pc.HeaderDescriptors, err = dataplane.ParseHeaderDescriptors(*descHeaders); err != nil {
			ln.Close()
			return fmt.Errorf("-descriptor-headers: %w", err)
		}
		if *ipv6Prefix < 1 || *ipv6Prefix > 128 {
			ln.Close()
			return fmt.Errorf("-ipv6-prefix %d: want 1 to 128 bits", *ipv6Prefix)
		}
		if *certIdentity && *proxyClientCA == "" {
			ln.Close()
			return errors.New("-identity-client-cert needs -proxy-tls-client-ca: only a verified certificate names a client")
		}
		if pc.JWT, err = jwtIdentity(ctx, *jwtClaim, *jwksURL, *jwtIssuer, *jwtAudience); err != nil {
			ln.Close()
			return err
		}
		stopProxy, err := serveProxy(ctx, stdout, apiCfg, keys, *proxyAddr, *upstream, getenv("SLUICE_PROXY_KEY"), pc, *trusted,
			*balancers, [3]string{*proxyCert, *proxyKey, *proxyClientCA})
		if err != nil {
			ln.Close()
			return err
		}
		defer stopProxy()
	}
	if *grpcAddr != "off" {
		rln, err := net.Listen("tcp", *grpcAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("grpc: %w", err)
		}
		var opts []grpc.ServerOption
		if *grpcCert != "" || *grpcKey != "" || *grpcClientCA != "" {
			tlsCfg, err := tlsfiles.ServerConfig(*grpcCert, *grpcKey, *grpcClientCA)
			if err != nil {
				ln.Close()
				rln.Close()
				return fmt.Errorf("grpc: %w", err)
			}
			opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
		}
		if *grpcMaxAge > 0 {
			opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: *grpcMaxAge, MaxConnectionAgeGrace: *grpcMaxAgeGrace}))
		}
		gs := dataplane.NewGRPCServer(apiCfg, opts...)
		stopHealth := dataplane.ServeHealth(gs, syncer.Loaded())
		go func() { <-ctx.Done(); stopHealth() }() // balancers drain first
		go func() { _ = gs.Serve(rln) }()
		defer dataplane.StopGRPC(gs, grpcStopGrace)
		fmt.Fprintf(stdout, "gRPC (Envoy rate limit service, DecisionService) on %s\n", rln.Addr())
	}
	return telemetry.Serve(ctx, srv, ln, 10*time.Second)
}

// grpcStopGrace bounds how long a stopping decider waits for its gRPC
// calls and streams (a health Watch never ends by itself) after the HTTP
// side has drained.
const grpcStopGrace = 5 * time.Second

// deciderName names this decider in events and the control plane's list:
// host/pid.
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

func deciderName() string {
	host, _ := os.Hostname()
	return host + "/" + strconv.Itoa(os.Getpid())
}

// jwtIdentity returns the proxy's JWT identity (see
// dataplane.NewJWKSIdentity), nil without a claim.
func jwtIdentity(ctx context.Context, claim, jwksURL, iss, aud string) (*dataplane.JWTIdentity, error) {
	if claim == "" && jwksURL == "" {
		return nil, nil
	}
	if claim == "" || jwksURL == "" {
		return nil, errors.New("-identity-jwt-claim and -identity-jwks-url go together")
	}
	return dataplane.NewJWKSIdentity(ctx, claim, jwksURL, iss, aud)
}

// serveProxy starts the reverse proxy of pc in front of upstream (or, with
// pc.ForwardAuth, the forward-auth service), for the tenant of the check
// key, over TLS with the certificate, key and client
// CA files of tlsFiles when they are named (after the PROXY protocol of
// balancers), and returns what stops it.
func serveProxy(ctx context.Context, stdout io.Writer, api dataplane.HTTPConfig, keys *dataplane.Keys, addr, upstream, key string,
	pc dataplane.ProxyConfig, trusted, balancers string, tlsFiles [3]string) (func(), error) {
	var u *url.URL
	var err error
	if !pc.ForwardAuth {
		u, err = url.Parse(upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("upstream %q: want an http:// or https:// URL", upstream)
		}
	}
	if key == "" {
		return nil, errors.New("reverse-proxy and forward-auth modes need SLUICE_PROXY_KEY, the check key of the tenant to enforce")
	}
	if pc.TrustedProxies, err = clientip.ParsePrefixes(trusted); err != nil {
		return nil, err
	}
	if pc.TierHeader != "" && len(pc.TrustedProxies) == 0 {
		return nil, errors.New("-tier-header needs -trusted-proxies: the tier is believed only from the gateway that sets it (name it; 0.0.0.0/0,::/0 trusts every peer)")
	}
	lbs, err := clientip.ParsePrefixes(balancers)
	if err != nil {
		return nil, fmt.Errorf("proxy-protocol: %w", err)
	}
	hash := policy.HashKey(key) // once, not per proxied request
	pc.API, pc.Upstream = api, u
	pc.Tenant = func() (*decide.Config, error) { return keys.Lookup(hash) }
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	// The PROXY header comes first on the wire, before any TLS.
	ln, scheme, err := tlsfiles.Wrap(clientip.ProxyProtocol(tcp, lbs), tlsFiles[0], tlsFiles[1], tlsFiles[2])
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	srv := &http.Server{Handler: dataplane.NewProxy(pc), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); _ = telemetry.Serve(ctx, srv, ln, 10*time.Second) }()
	if pc.ForwardAuth {
		fmt.Fprintf(stdout, "answering forward-auth calls on %s://%s\n", scheme, ln.Addr())
	} else {
		fmt.Fprintf(stdout, "proxying %s://%s to %s\n", scheme, ln.Addr(), u.Redacted())
	}
	return func() { <-done }, nil
}
