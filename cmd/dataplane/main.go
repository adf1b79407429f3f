// Command dataplane is a Sluice decider: it follows the control plane's
// configuration, decides checks against Redis (or, without Redis, its own
// memory), and serves the check APIs (HTTP, Connect, gRPC, Envoy's rate
// limit service, gubernator's and Unkey's), /healthz and /readyz, with
// /metrics on its admin listener; optionally a reverse proxy or a
// gateway's forward-auth service.
//
// Its flags and variables are internal/dataplane's Settings.Flags, and
// docs/configuration.md; flags override the environment. Secrets come
// from the environment only, or the file a NAME_FILE variable names:
//
//	SLUICE_DECIDER_KEY        the decider credential, or a tenant's check key (the decider then serves that tenant alone)
//	SLUICE_DECIDER_KEY_FILE   a file holding it instead, reread when it changes (a rotation without a restart)
//	SLUICE_PROXY_KEY          the check key of the tenant the proxy enforces
//	KAFKA_SASL_PASSWORD       the SASL password for Kafka
//	REDIS_URL                 may carry Redis's password
//
// With OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// set, each decision is a span ("sluice.decide") in the trace of the
// request it decides, exported over OTLP/HTTP (internal/tracing; also
// OTEL_EXPORTER_OTLP_HEADERS, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG,
// OTEL_SERVICE_NAME).
//
// The garbage collector runs at Go's defaults (GOGC and GOMEMLIMIT set
// it as for any Go program). GOMAXPROCS=1 may serve more decisions on a small
// machine the decider shares with Redis (docs/operations.md, "Tuning a
// decider").
package main

import (
	"context"
	"flag"
	"io"
	"log/slog"

	"github.com/sluicehq/sluice/internal/dataplane"
	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/secretfile"
)

func main() {
	flagenv.Main("dataplane", run)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := flagenv.NewEnv(getenv)
	cfg := dataplane.DefaultSettings()
	fs := flag.NewFlagSet("dataplane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.Flags(fs, e)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := e.Err(); err != nil { // a variable that does not parse stops the binary, named
		return err
	}
	keyFunc, err := secretfile.FromEnv(getenv, "SLUICE_DECIDER_KEY")
	if err != nil {
		return err
	}
	cfg.DeciderKey, cfg.DeciderKeyFunc, cfg.Proxy.Key = getenv("SLUICE_DECIDER_KEY"), keyFunc, getenv("SLUICE_PROXY_KEY")
	cfg.Logger, cfg.Stdout, cfg.Getenv = slog.New(slog.NewJSONHandler(stderr, nil)), stdout, getenv
	return dataplane.Serve(ctx, cfg)
}
