package controlplane

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/clientip"
	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/pgstore"
	"github.com/sluicehq/sluice/internal/prune"
	"github.com/sluicehq/sluice/internal/reports"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/tenantapply"
	"github.com/sluicehq/sluice/internal/tlsfiles"
	"github.com/sluicehq/sluice/internal/tracing"
	"github.com/sluicehq/sluice/migrations"
)

// Settings are the control plane binary's: its listeners, database,
// retention and guards, one field per setting. DefaultSettings gives each
// its default; Flags defines them; Serve runs them.
type Settings struct {
	Addr              string // the API, the console, /healthz and /readyz
	AdminAddr         string // /metrics and detailed health; "off" none
	DatabaseURL       string
	AuditRetention    time.Duration // 0: forever
	OverrideRetention time.Duration // 0: forever
	AuthFailures      int           // 0: unlimited
	KeyCalls          int           // 0: unlimited
	TrustedProxies    string        // comma-separated CIDRs
	ProxyProtocol     string        // comma-separated CIDRs
	ReadTimeout       time.Duration
	TLSCert, TLSKey   string

	// The operator keys and decider credentials (comma-separated), and
	// what reads them again from their files (nil: fixed).
	OperatorKey, DeciderKey         string
	OperatorKeyFunc, DeciderKeyFunc func() string

	Logger *slog.Logger            // nil: JSON to Stderr
	Stdout io.Writer               // where the listening addresses are printed; nil: none
	Getenv func(key string) string // the OpenTelemetry variables (tracing.Setup); nil: none
}

// DefaultSettings returns every setting at its default.
func DefaultSettings() Settings {
	return Settings{Addr: "127.0.0.1:8081", AdminAddr: "127.0.0.1:9081",
		DatabaseURL: "postgres://postgres@127.0.0.1:5432/sluice?sslmode=disable", OverrideRetention: pgstore.DefaultOverrideRetention,
		AuthFailures: 30, KeyCalls: 6000, ReadTimeout: DefaultReadTimeout}
}

// Flags defines a flag for each setting on fs, its default the variable
// named below where it is set, else s's value. The flags and variables:
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
func (s *Settings) Flags(fs *flag.FlagSet, e *flagenv.Env) {
	fs.StringVar(&s.Addr, "addr", e.String("SLUICE_CONTROLPLANE_ADDR", s.Addr), "listen address of the API, the console, /healthz and /readyz")
	fs.StringVar(&s.AdminAddr, "admin-addr", e.String("SLUICE_ADMIN_ADDR", s.AdminAddr), `listen address of /metrics and detailed health, for operators alone; "off" none`)
	fs.StringVar(&s.DatabaseURL, "database-url", e.String("DATABASE_URL", s.DatabaseURL), "PostgreSQL URL")
	fs.DurationVar(&s.AuditRetention, "audit-retention", e.Duration("SLUICE_AUDIT_RETENTION", s.AuditRetention), "how long audit log rows are kept (0: forever)")
	fs.DurationVar(&s.OverrideRetention, "override-retention", e.Duration("SLUICE_OVERRIDE_RETENTION", s.OverrideRetention), "how long an expired override is kept before it is deleted (0: forever)")
	fs.IntVar(&s.AuthFailures, "auth-failures", e.Int("SLUICE_AUTH_FAILURES", s.AuthFailures), "invalid keys an address may send a minute before its calls are refused for a while (0: unlimited)")
	fs.IntVar(&s.KeyCalls, "key-calls", e.Int("SLUICE_KEY_CALLS", s.KeyCalls), "calls a key may make a minute (as many at once) before its calls are refused for a while (0: unlimited)")
	fs.StringVar(&s.TrustedProxies, "trusted-proxies", e.String("SLUICE_TRUSTED_PROXIES", s.TrustedProxies), "CIDRs whose X-Forwarded-For names the caller's address for -auth-failures")
	fs.StringVar(&s.ProxyProtocol, "proxy-protocol", e.String("SLUICE_PROXY_PROTOCOL", s.ProxyProtocol), "CIDRs of load balancers opening each connection with a PROXY protocol header, whose address is then the caller's")
	fs.DurationVar(&s.ReadTimeout, "read-timeout", e.Duration("SLUICE_READ_TIMEOUT", s.ReadTimeout), "longest a client may take to send a whole request, headers and body")
	fs.StringVar(&s.TLSCert, "tls-cert", e.String("SLUICE_CONTROLPLANE_TLS_CERT", s.TLSCert), "PEM certificate: with -tls-key the port serves HTTPS (reread when the files change)")
	fs.StringVar(&s.TLSKey, "tls-key", e.String("SLUICE_CONTROLPLANE_TLS_KEY", s.TLSKey), "PEM private key of -tls-cert")
}

// Validate checks every setting that needs no network, naming the flag of
// the first wrong one.
func (s *Settings) Validate() error {
	switch {
	case s.ReadTimeout <= 0:
		return fmt.Errorf("-read-timeout (SLUICE_READ_TIMEOUT) %v: want more than 0", s.ReadTimeout)
	case s.KeyCalls < 0:
		return fmt.Errorf("-key-calls %d: must not be negative (0: unlimited)", s.KeyCalls)
	case s.AuthFailures < 0:
		return fmt.Errorf("-auth-failures %d: must not be negative (0: unlimited)", s.AuthFailures)
	}
	if _, err := clientip.ParsePrefixes(s.TrustedProxies); err != nil {
		return fmt.Errorf("-trusted-proxies: %w", err)
	}
	if _, err := clientip.ParsePrefixes(s.ProxyProtocol); err != nil {
		return fmt.Errorf("-proxy-protocol: %w", err)
	}
	if s.AuditRetention < 0 {
		return fmt.Errorf("-audit-retention %v: must not be negative", s.AuditRetention)
	}
	if s.OverrideRetention < 0 {
		return fmt.Errorf("-override-retention %v: must not be negative", s.OverrideRetention)
	}
	return nil
}

// Serve runs the control plane of s until ctx ends: the migrations, the
// pruning of old rows, the API and console with their listeners.
func Serve(ctx context.Context, s Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	trusted, _ := clientip.ParsePrefixes(s.TrustedProxies) // checked by Validate
	lbs, _ := clientip.ParsePrefixes(s.ProxyProtocol)
	logger, stdout, getenv := s.Logger, s.Stdout, s.Getenv
	if logger == nil {
		logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if s.OperatorKey == "" && s.OperatorKeyFunc == nil {
		logger.Warn("SLUICE_OPERATOR_KEY is not set: nobody can manage tenants")
	}

	if err := migrations.Apply(s.DatabaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	store := pgstore.New(pool)
	pctx, stopPruning := context.WithCancel(ctx)
	defer stopPruning() // before the pool closes
	if s.AuditRetention > 0 {
		go prune.Loop(pctx, store.PruneAudit, s.AuditRetention, time.Hour, time.Now, logger, "old audit log rows")
	}
	if s.OverrideRetention > 0 {
		go prune.Loop(pctx, store.PruneOverrides, s.OverrideRetention, time.Hour, time.Now, logger, "expired overrides")
	}

	reg := telemetry.NewRegistry()
	var ready telemetry.Readiness
	db := telemetry.NewProbe(func(ctx context.Context) error { return migrations.Check(ctx, pool) }, time.Second)
	mux := http.NewServeMux()
	isReady := func() bool { return ready.Ready() && db.OK() }
	telemetry.MountPublic(mux, isReady)
	admin := http.NewServeMux()
	telemetry.Mount(admin, reg, isReady, nil)
	adminAt, stopAdmin, err := telemetry.ServeAdmin(ctx, s.AdminAddr, admin)
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
	mux.Handle("/", NewHandler(HandlerConfig{OperatorKey: s.OperatorKey, Registerer: reg,
		DeciderKey: s.DeciderKey, OperatorKeyFunc: s.OperatorKeyFunc, DeciderKeyFunc: s.DeciderKeyFunc, Closing: closing, Tracer: tracer,
		Logger: logger, AuthFailures: s.AuthFailures, KeyCalls: s.KeyCalls, TrustedProxies: trusted, ReadTimeout: s.ReadTimeout}.OnPostgres(store, 0)))

	tcp, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	// The PROXY header comes first on the wire, before any TLS.
	ln, scheme, err := tlsfiles.Wrap(clientip.ProxyProtocol(tcp, lbs), s.TLSCert, s.TLSKey, "")
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

// OnPostgres returns cfg with its store parts on store's PostgreSQL: the
// configuration, a watch hub serving every decider's watch from one
// LISTEN (re-reading each tenant every recheck, 0: 5s), tenant files in
// its transactions, and the reports on the analytics tables of the same
// database.
func (cfg HandlerConfig) OnPostgres(store *pgstore.Store, recheck time.Duration) HandlerConfig {
	cfg.Store, cfg.Watches = store, store.NewHub(pgstore.WatchConfig{Recheck: recheck, Logger: cfg.Logger})
	cfg.Files, cfg.Reports = tenantapply.Files[*pgstore.Store]{Store: store}, reports.New(store.Pool())
	return cfg
}
