// Command controlplane serves Sluice's control-plane API (Connect, gRPC and
// gRPC-Web) on PostgreSQL, with /healthz, /readyz and /metrics.
//
// Configuration (flags override the environment):
//
//	-addr          SLUICE_CONTROLPLANE_ADDR  listen address of the API, the console, /healthz and /readyz (default 127.0.0.1:8081)
//	-admin-addr    SLUICE_ADMIN_ADDR         listen address of /metrics and detailed health, plaintext, for operators alone; "off" none (default 127.0.0.1:9081)
//	-database-url  DATABASE_URL              PostgreSQL URL (default postgres://postgres@127.0.0.1:5432/sluice?sslmode=disable)
//	-audit-retention SLUICE_AUDIT_RETENTION  how long audit log rows are kept, e.g. 2160h (default 0: forever)
//	-override-retention SLUICE_OVERRIDE_RETENTION  how long an expired override is kept before it is deleted (default 168h; 0: forever)
//	-auth-failures SLUICE_AUTH_FAILURES      invalid keys an address may send a minute before its calls are refused for a while (default 30; 0: unlimited)
//	-key-calls     SLUICE_KEY_CALLS          calls a key (operator, admin, viewer; a check key's config pulls) may make a minute before its calls are refused for a while (default 6000; 0: unlimited)
//	-trusted-proxies SLUICE_TRUSTED_PROXIES  comma-separated CIDRs (a load balancer's) whose X-Forwarded-For names the caller's address for -auth-failures (default none)
//	-proxy-protocol SLUICE_PROXY_PROTOCOL    comma-separated CIDRs of layer-4 load balancers that open each connection with a PROXY protocol header (v1 or v2), whose source address is then the caller's; their connections without one are refused, others served as they come (default none)
//	-read-timeout  SLUICE_READ_TIMEOUT       longest a client may take to send a whole request, headers and body; a streaming call once its request is read is not bounded (default 10s)
//	-tls-cert      SLUICE_CONTROLPLANE_TLS_CERT PEM certificate: with -tls-key the port serves HTTPS (HTTP/2 and HTTP/1.1), the pair reread when the files change (default none: plaintext)
//	-tls-key       SLUICE_CONTROLPLANE_TLS_KEY  PEM private key of -tls-cert
//	               SLUICE_OPERATOR_KEY       the operator's key; environment only, so it never shows in process lists;
//	                                         several, comma-separated, are each accepted (a rotation)
//	               SLUICE_DECIDER_KEY        the deciders' credential for the config service; environment only;
//	                                         several, comma-separated, as the operator key's
//	               SLUICE_OPERATOR_KEY_FILE  a file holding the operator keys instead, reread when it changes:
//	                                         a rotation without a restart
//	               SLUICE_DECIDER_KEY_FILE   a file holding the decider credentials instead, reread likewise
//
// With OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// set, each unary API call is a span named for its procedure, exported over
// OTLP/HTTP (internal/tracing).
//
// Every secret variable (SLUICE_OPERATOR_KEY, SLUICE_DECIDER_KEY,
// DATABASE_URL) may be read from the file its NAME_FILE variable names.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/controlplane"
	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/prune"
	"github.com/sluicehq/sluice/internal/secretfile"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/tlsfiles"
	"github.com/sluicehq/sluice/internal/tracing"
	"github.com/sluicehq/sluice/migrations"
)

func main() { flagenv.Main("controlplane", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := flagenv.NewEnv(getenv)
	env := e.String
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", env("SLUICE_CONTROLPLANE_ADDR", "127.0.0.1:8081"), "listen address of the API, the console, /healthz and /readyz")
	adminAddr := fs.String("admin-addr", env("SLUICE_ADMIN_ADDR", "127.0.0.1:9081"), `listen address of /metrics and detailed health, for operators alone; "off" none`)
	dbURL := fs.String("database-url", env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sluice?sslmode=disable"), "PostgreSQL URL")
	auditRetention := fs.Duration("audit-retention", e.Duration("SLUICE_AUDIT_RETENTION", 0), "how long audit log rows are kept (0: forever)")
	overrideRetention := fs.Duration("override-retention", e.Duration("SLUICE_OVERRIDE_RETENTION", pgstore.DefaultOverrideRetention), "how long an expired override is kept before it is deleted (0: forever)")
	authFailures := fs.Int("auth-failures", e.Int("SLUICE_AUTH_FAILURES", 30), "invalid keys an address may send a minute before its calls are refused for a while (0: unlimited)")
	keyCalls := fs.Int("key-calls", e.Int("SLUICE_KEY_CALLS", 6000), "calls a key may make a minute (as many at once) before its calls are refused for a while (0: unlimited)")
	trustedProxies := fs.String("trusted-proxies", env("SLUICE_TRUSTED_PROXIES", ""), "CIDRs whose X-Forwarded-For names the caller's address for -auth-failures")
	balancers := fs.String("proxy-protocol", env("SLUICE_PROXY_PROTOCOL", ""), "CIDRs of load balancers opening each connection with a PROXY protocol header, whose address is then the caller's")
	readTimeout := fs.Duration("read-timeout", e.Duration("SLUICE_READ_TIMEOUT", controlplane.DefaultReadTimeout), "longest a client may take to send a whole request, headers and body")
	tlsCert := fs.String("tls-cert", env("SLUICE_CONTROLPLANE_TLS_CERT", ""), "PEM certificate: with -tls-key the port serves HTTPS (reread when the files change)")
	tlsKey := fs.String("tls-key", env("SLUICE_CONTROLPLANE_TLS_KEY", ""), "PEM private key of -tls-cert")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := e.Err(); err != nil { // a variable that does not parse stops the binary, named
		return err
	}
	if *readTimeout <= 0 {
		return fmt.Errorf("-read-timeout (SLUICE_READ_TIMEOUT) %v: want more than 0", *readTimeout)
	}
	if *keyCalls < 0 {
		return fmt.Errorf("-key-calls %d: must not be negative (0: unlimited)", *keyCalls)
	}
	if *authFailures < 0 {
		return fmt.Errorf("-auth-failures %d: must not be negative (0: unlimited)", *authFailures)
	}
	trusted, err := clientip.ParsePrefixes(*trustedProxies)
	if err != nil {
		return fmt.Errorf("-trusted-proxies: %w", err)
	}
	lbs, err := clientip.ParsePrefixes(*balancers)
	if err != nil {
		return fmt.Errorf("-proxy-protocol: %w", err)
	}
	if *auditRetention < 0 {
		return fmt.Errorf("-audit-retention %v: must not be negative", *auditRetention)
	}
	if *overrideRetention < 0 {
		return fmt.Errorf("-override-retention %v: must not be negative", *overrideRetention)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	operatorKey := getenv("SLUICE_OPERATOR_KEY")
	operatorKeyFunc, err := secretfile.FromEnv(getenv, "SLUICE_OPERATOR_KEY")
	if err != nil {
		return err
	}
	deciderKeyFunc, err := secretfile.FromEnv(getenv, "SLUICE_DECIDER_KEY")
	if err != nil {
		return err
	}
	if operatorKey == "" && operatorKeyFunc == nil {
		logger.Warn("SLUICE_OPERATOR_KEY is not set: nobody can manage tenants")
	}

	if err := migrations.Apply(*dbURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	store := pgstore.New(pool)
	pctx, stopPruning := context.WithCancel(ctx)
	defer stopPruning() // before the pool closes
	if *auditRetention > 0 {
		go prune.Loop(pctx, store.PruneAudit, *auditRetention, time.Hour, time.Now, logger, "old audit log rows")
	}
	if *overrideRetention > 0 {
		go prune.Loop(pctx, store.PruneOverrides, *overrideRetention, time.Hour, time.Now, logger, "expired overrides")
	}

	reg := telemetry.NewRegistry()
	var ready telemetry.Readiness
	db := telemetry.NewProbe(func(ctx context.Context) error { return migrations.Check(ctx, pool) }, time.Second)
	mux := http.NewServeMux()
	isReady := func() bool { return ready.Ready() && db.OK() }
	telemetry.MountPublic(mux, isReady)
	admin := http.NewServeMux()
	telemetry.Mount(admin, reg, isReady, nil)
	adminAt, stopAdmin, err := telemetry.ServeAdmin(ctx, *adminAddr, admin)
	if err != nil {
		return err
	}
	defer stopAdmin()
	closing := make(chan struct{})
	tracer, stopTracing, err := tracing.Setup(ctx, "sluice-controlplane", getenv)
	if err != nil {
		return err
	}
	defer stopTracing()
	mux.Handle("/", controlplane.NewHandler(controlplane.Config{Store: store, OperatorKey: operatorKey, Registerer: reg,
		DeciderKey: getenv("SLUICE_DECIDER_KEY"), OperatorKeyFunc: operatorKeyFunc, DeciderKeyFunc: deciderKeyFunc, Closing: closing, Tracer: tracer, Logger: logger, AuthFailures: *authFailures, KeyCalls: *keyCalls, TrustedProxies: trusted, ReadTimeout: *readTimeout}))

	tcp, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	// The PROXY header comes first on the wire, before any TLS.
	ln, scheme, err := tlsfiles.Wrap(clientip.ProxyProtocol(tcp, lbs), *tlsCert, *tlsKey, "")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)            // with TLS, by ALPN
	srv.Protocols.SetUnencryptedHTTP2(true) // gRPC without TLS, behind a proxy that terminates it
	srv.RegisterOnShutdown(func() { close(closing) })
	ready.SetReady(true)
	fmt.Fprintf(stdout, "control plane listening on %s://%s (console: %[1]s://%[2]s/console/)\n", scheme, ln.Addr())
	if adminAt != "" {
		fmt.Fprintf(stdout, "admin (metrics, detailed health) on http://%s\n", adminAt)
	}
	return telemetry.Serve(ctx, srv, ln, 10*time.Second)
}
