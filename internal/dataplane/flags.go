package dataplane

import (
	"flag"

	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/kafkasec"
)

// Flags defines a flag for each setting on fs, its default the variable
// named below where it is set, else c's value (DefaultSettings' when c is). The
// flags and variables:
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
//	-http-fasthttp  SLUICE_HTTP_FASTHTTP      serve the check routes' HTTP/1.1 on fasthttp, the rest on net/http (default true; false: net/http alone)
//	-redis-spin     SLUICE_REDIS_SPIN         how long a read waiting for Redis polls before it sleeps, at low load (default 0: never)
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
//	-local-share    SLUICE_LOCAL_SHARE        share of a limit enforced locally while Redis fails or the decider is overloaded (default 0: 1/the live deciders, as the control plane counts them)
//	-sync-max-keys  SLUICE_SYNC_MAX_KEYS      keys counted locally at once for rules with a sync interval, ~200 B each (default 262144)
//	-grpc-addr      SLUICE_GRPC_ADDR          gRPC listener: Envoy's rate limit service, sluice.v1.DecisionService and gubernator's V1 (default 127.0.0.1:8089; "off" disables)
//	-grpc-max-connection-age SLUICE_GRPC_MAX_CONNECTION_AGE gRPC connections are closed gracefully after this long, so clients spread over new deciders (default 0: never)
//	-grpc-max-connection-age-grace SLUICE_GRPC_MAX_CONNECTION_AGE_GRACE how long calls in flight on such a connection may finish (default 30s)
//	-grpc-tls-cert  SLUICE_GRPC_TLS_CERT      PEM certificate: with -grpc-tls-key the gRPC port serves TLS, the pair reread when the files change (default none: plaintext)
//	-grpc-tls-key   SLUICE_GRPC_TLS_KEY       PEM private key of -grpc-tls-cert
//	-grpc-tls-client-ca SLUICE_GRPC_TLS_CLIENT_CA PEM CA bundle: gRPC clients must present a certificate it signed (mutual TLS; default none)
//	-rule-metrics   SLUICE_RULE_METRICS       count each rule's answers in /metrics: sluice_rule_decisions_total and sluice_rule_near_limit_total, a series per tenant, tier, rule (and outcome) (default true)
//	-shadow-mode    SLUICE_SHADOW_MODE        every rule of every tenant in shadow: decisions reported as ever, none rejected (default false)
//	-quota-mode     SLUICE_QUOTA_MODE         Envoy's rate limit service: every descriptor a quota, a call rejected only when all its limited descriptors are over (envoyproxy/ratelimit's QUOTA_MODE; default false)
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
// SLUICE_DECIDER_KEY and SLUICE_PROXY_KEY are read by the binary, from the
// environment only (or their _FILE variables), never from a flag.
func (c *Settings) Flags(fs *flag.FlagSet, e *flagenv.Env) {
	fs.StringVar(&c.Addr, "addr", e.String("SLUICE_DATAPLANE_ADDR", c.Addr), "listen address of the check APIs, /healthz and /readyz")
	fs.StringVar(&c.AdminAddr, "admin-addr", e.String("SLUICE_ADMIN_ADDR", c.AdminAddr), `listen address of /metrics and detailed health, for operators alone; "off" none`)
	fs.StringVar(&c.ControlPlane, "control-plane", e.String("SLUICE_CONTROL_PLANE_URL", c.ControlPlane), "control plane URL")
	fs.StringVar(&c.RedisURL, "redis-url", e.String("REDIS_URL", c.RedisURL), "redis:// URL; empty decides in this process only")
	fs.BoolVar(&c.RedisCluster, "redis-cluster", e.Bool("SLUICE_REDIS_CLUSTER", c.RedisCluster), "the Redis URL names a Redis Cluster: its host and addr parameters are seed nodes")
	fs.BoolVar(&c.RedisSentinel, "redis-sentinel", e.Bool("SLUICE_REDIS_SENTINEL", c.RedisSentinel), "the Redis URL names Sentinels (host and addr parameters) and, as master_name, the master they watch")
	fs.BoolVar(&c.HTTPFast, "http-fasthttp", e.Bool("SLUICE_HTTP_FASTHTTP", c.HTTPFast), "serve the check routes' HTTP/1.1 on fasthttp; false: net/http alone")
	fs.DurationVar(&c.RedisSpin, "redis-spin", e.Duration("SLUICE_REDIS_SPIN", c.RedisSpin), "how long a read waiting for Redis polls before it sleeps; 0 never")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", e.String("SLUICE_REDIS_PREFIX", c.RedisPrefix), "prefix of every counter key")
	fs.BoolVar(&c.RedisBatch, "redis-batch", e.Bool("SLUICE_REDIS_BATCH", c.RedisBatch), "coalesce concurrent decisions into pipelines")
	fs.StringVar(&c.StateFile, "state-file", e.String("SLUICE_STATE_FILE", c.StateFile), "last-known-good config")
	fs.StringVar(&c.KafkaBrokers, "kafka-brokers", e.String("KAFKA_BROKERS", c.KafkaBrokers), "comma-separated brokers for decision events")
	fs.StringVar(&c.EventsTopic, "events-topic", e.String("SLUICE_EVENTS_TOPIC", c.EventsTopic), "topic of decision events")
	fs.StringVar(&c.EventsSpool, "events-spool", e.String("SLUICE_EVENTS_SPOOL", c.EventsSpool), `directory keeping the events Kafka did not take, sent when it returns; default events-spool beside -state-file, "off" none`)
	fs.IntVar(&c.EventsSpoolMB, "events-spool-mb", e.Int("SLUICE_EVENTS_SPOOL_MB", c.EventsSpoolMB), "bound of the events spool, in MiB; past it events are dropped and counted")
	c.Kafka = kafkasec.Register(fs, e)
	fs.DurationVar(&c.Budget, "budget", e.Duration("SLUICE_DECISION_BUDGET", c.Budget), "longest a decision may wait in the decider to be sent to Redis; past it, overload")
	fs.DurationVar(&c.RedisTimeout, "redis-timeout", e.Duration("SLUICE_REDIS_TIMEOUT", c.RedisTimeout), "longest Redis may take to answer, from the moment a pipeline is written; past it, Redis has failed")
	fs.IntVar(&c.AuthFailures, "auth-failures", e.Int("SLUICE_AUTH_FAILURES", c.AuthFailures), "invalid check keys an address may send a minute before its calls are refused for a while (0: unlimited)")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", e.Int("SLUICE_MAX_IN_FLIGHT", c.MaxInFlight), "decisions waiting on Redis at once, shared fairly between tenants; beyond, overload (0: no bound)")
	fs.StringVar(&c.OverloadPolicy, "overload-policy", e.String("SLUICE_OVERLOAD_POLICY", c.OverloadPolicy), "what answers a decision overload keeps from Redis: local, failure_mode or reject")
	fs.Float64Var(&c.LocalShare, "local-share", e.Float("SLUICE_LOCAL_SHARE", c.LocalShare), "share of a limit enforced locally while Redis fails or the decider is overloaded (0: 1/the live deciders)")
	fs.IntVar(&c.SyncMaxKeys, "sync-max-keys", e.Int("SLUICE_SYNC_MAX_KEYS", c.SyncMaxKeys), "keys counted locally at once for rules with a sync interval; beyond, decided in Redis")
	fs.BoolVar(&c.RuleMetrics, "rule-metrics", e.Bool("SLUICE_RULE_METRICS", c.RuleMetrics), "count each rule's answers in /metrics (series per tenant, tier and rule)")
	fs.BoolVar(&c.QuotaMode, "quota-mode", e.Bool("SLUICE_QUOTA_MODE", c.QuotaMode), "Envoy's rate limit service: every descriptor a quota, a call rejected only when all its limited descriptors are over (envoyproxy/ratelimit's QUOTA_MODE)")
	fs.BoolVar(&c.ShadowMode, "shadow-mode", e.Bool("SLUICE_SHADOW_MODE", c.ShadowMode), "every rule of every tenant in shadow: decisions are reported as ever, none rejected")
	fs.StringVar(&c.RateLimitHeaders, "rate-limit-headers", e.String("SLUICE_RATE_LIMIT_HEADERS", c.RateLimitHeaders), "the rate limit headers answered: ietf (RateLimit-Policy, RateLimit, X-RateLimit-*), draft-6 (RateLimit-Policy 10;w=60, RateLimit-Limit, -Remaining, -Reset, X-RateLimit-*), x (X-RateLimit-* alone), none (Retry-After alone) or kong (X-RateLimit-Limit-Minute and -Remaining-Minute per rule, RateLimit-Limit, -Remaining, -Reset)")
	fs.StringVar(&c.CORSOrigins, "cors-origins", e.String("SLUICE_CORS_ORIGINS", c.CORSOrigins), "comma-separated origins whose browsers may call /v1/check (the console's)")
	p := &c.Proxy
	fs.StringVar(&p.Upstream, "upstream", e.String("SLUICE_UPSTREAM", p.Upstream), "reverse-proxy mode: forward allowed requests to this URL")
	fs.IntVar(&p.DenyStatus, "forward-auth-deny-status", e.Int("SLUICE_FORWARD_AUTH_DENY_STATUS", p.DenyStatus), "the status of a forward-auth rejection: 429, or 403 for nginx's auth_request")
	fs.BoolVar(&p.ForwardAuth, "forward-auth", e.Bool("SLUICE_FORWARD_AUTH", p.ForwardAuth), "the proxy port answers a gateway's forward-auth calls (200 or 429) instead of forwarding to -upstream")
	fs.StringVar(&p.Addr, "proxy-addr", e.String("SLUICE_PROXY_ADDR", p.Addr), "listen address of the reverse proxy")
	fs.StringVar(&p.TLS.Cert, "proxy-tls-cert", e.String("SLUICE_PROXY_TLS_CERT", p.TLS.Cert), "proxy: PEM certificate; with -proxy-tls-key the proxy serves HTTPS (reread when the files change)")
	fs.StringVar(&p.TLS.Key, "proxy-tls-key", e.String("SLUICE_PROXY_TLS_KEY", p.TLS.Key), "proxy: PEM private key of -proxy-tls-cert")
	fs.StringVar(&p.TLS.ClientCA, "proxy-tls-client-ca", e.String("SLUICE_PROXY_TLS_CLIENT_CA", p.TLS.ClientCA), "proxy: PEM CA bundle clients' certificates must chain to (mutual TLS)")
	fs.BoolVar(&p.ClientCert, "identity-client-cert", e.Bool("SLUICE_IDENTITY_CLIENT_CERT", p.ClientCert), "proxy: name the client by its verified certificate")
	fs.StringVar(&p.IdentityHeader, "identity-header", e.String("SLUICE_IDENTITY_HEADER", p.IdentityHeader), "proxy: header naming the client")
	fs.StringVar(&p.JWTClaim, "identity-jwt-claim", e.String("SLUICE_IDENTITY_JWT_CLAIM", p.JWTClaim), "proxy: claim of a verified bearer token naming the client, e.g. sub")
	fs.StringVar(&p.JWKSURL, "identity-jwks-url", e.String("SLUICE_IDENTITY_JWKS_URL", p.JWKSURL), "proxy: the identity provider's JSON Web Key Set URL")
	fs.StringVar(&p.JWTIssuer, "identity-jwt-issuer", e.String("SLUICE_IDENTITY_JWT_ISSUER", p.JWTIssuer), "proxy: the issuer a token must name")
	fs.StringVar(&p.JWTAudience, "identity-jwt-audience", e.String("SLUICE_IDENTITY_JWT_AUDIENCE", p.JWTAudience), "proxy: an audience a token must name")
	fs.StringVar(&p.IdentityCookie, "identity-cookie", e.String("SLUICE_IDENTITY_COOKIE", p.IdentityCookie), "proxy: cookie naming the client")
	fs.StringVar(&p.TrustedProxies, "trusted-proxies", e.String("SLUICE_TRUSTED_PROXIES", p.TrustedProxies), "proxy: CIDRs whose X-Forwarded-For is believed")
	fs.IntVar(&p.IPv6Prefix, "ipv6-prefix", e.Int("SLUICE_IPV6_PREFIX", p.IPv6Prefix), "proxy: leading bits of an IPv6 client's address that name it (its ip, and its identity when nothing else names it); 128: the address")
	fs.StringVar(&p.ProxyProtocol, "proxy-protocol", e.String("SLUICE_PROXY_PROTOCOL", p.ProxyProtocol), "proxy: CIDRs of load balancers opening each connection with a PROXY protocol header (v1 or v2), whose address is then the client's")
	fs.StringVar(&p.TierHeader, "tier-header", e.String("SLUICE_TIER_HEADER", p.TierHeader), "proxy: header choosing the tier")
	fs.StringVar(&p.DescriptorHeaders, "descriptor-headers", e.String("SLUICE_DESCRIPTOR_HEADERS", p.DescriptorHeaders), "proxy: descriptor=Header pairs, comma-separated: each header a descriptor for rules")
	fs.DurationVar(&p.MaxDelay, "max-delay", e.Duration("SLUICE_MAX_DELAY", p.MaxDelay), "proxy: longest hold for a leaky-bucket delay")
	fs.BoolVar(&p.PreserveHost, "preserve-host", e.Bool("SLUICE_PRESERVE_HOST", p.PreserveHost), "proxy: forward the client's Host header, not the upstream's")
	fs.BoolVar(&p.FoldRoutes, "fold-routes", e.Bool("SLUICE_FOLD_ROUTES", p.FoldRoutes), "proxy: the route descriptor in lower case without a trailing slash (rules name routes so), for upstreams that serve /Login/ as /login")
	fs.DurationVar(&p.UpstreamTimeout, "upstream-timeout", e.Duration("SLUICE_UPSTREAM_TIMEOUT", p.UpstreamTimeout), "proxy: longest wait for the upstream's response headers, then 504 (0 none)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", e.String("SLUICE_GRPC_ADDR", c.GRPCAddr), `gRPC listener (Envoy RLS, DecisionService, gubernator's V1); "off" disables`)
	fs.DurationVar(&c.GRPCMaxConnectionAge, "grpc-max-connection-age", e.Duration("SLUICE_GRPC_MAX_CONNECTION_AGE", c.GRPCMaxConnectionAge), "gRPC connections are closed gracefully after this long, so clients spread over new deciders; 0 never")
	fs.DurationVar(&c.GRPCMaxConnectionAgeGrace, "grpc-max-connection-age-grace", e.Duration("SLUICE_GRPC_MAX_CONNECTION_AGE_GRACE", c.GRPCMaxConnectionAgeGrace), "how long calls in flight on such a connection may finish")
	fs.StringVar(&c.TLS.Cert, "tls-cert", e.String("SLUICE_DATAPLANE_TLS_CERT", c.TLS.Cert), "PEM certificate: with -tls-key the HTTP port serves HTTPS (reread when the files change)")
	fs.StringVar(&c.TLS.Key, "tls-key", e.String("SLUICE_DATAPLANE_TLS_KEY", c.TLS.Key), "PEM private key of -tls-cert")
	fs.StringVar(&c.TLS.ClientCA, "tls-client-ca", e.String("SLUICE_DATAPLANE_TLS_CLIENT_CA", c.TLS.ClientCA), "PEM CA bundle: HTTP clients must present a certificate it signed (mutual TLS)")
	fs.StringVar(&c.GRPCTLS.Cert, "grpc-tls-cert", e.String("SLUICE_GRPC_TLS_CERT", c.GRPCTLS.Cert), "PEM certificate: with -grpc-tls-key the gRPC port serves TLS (reread when the files change)")
	fs.StringVar(&c.GRPCTLS.Key, "grpc-tls-key", e.String("SLUICE_GRPC_TLS_KEY", c.GRPCTLS.Key), "PEM private key of -grpc-tls-cert")
	fs.StringVar(&c.GRPCTLS.ClientCA, "grpc-tls-client-ca", e.String("SLUICE_GRPC_TLS_CLIENT_CA", c.GRPCTLS.ClientCA), "PEM CA bundle: gRPC clients must present a certificate it signed (mutual TLS)")
}
