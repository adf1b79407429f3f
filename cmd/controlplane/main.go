// Command controlplane serves Sluice's control-plane API (Connect, gRPC and
// gRPC-Web) and console on PostgreSQL, with /healthz and /readyz, and
// /metrics on its admin listener.
//
// Its flags and variables are internal/controlplane's Settings.Flags, and
// docs/configuration.md; flags override the environment. Secrets come
// from the environment only, or the file a NAME_FILE variable names:
//
//	SLUICE_OPERATOR_KEY       the operator's key; several, comma-separated, are each accepted (a rotation)
//	SLUICE_DECIDER_KEY        the deciders' credential for the config service; several, as the operator key's
//	SLUICE_OPERATOR_KEY_FILE  a file holding the operator keys instead, reread when it changes: a rotation without a restart
//	SLUICE_DECIDER_KEY_FILE   a file holding the decider credentials instead, reread likewise
//	DATABASE_URL              may carry PostgreSQL's password
//
// With OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// set, each unary API call is a span named for its procedure, exported over
// OTLP/HTTP (internal/tracing).
package main

import (
	"context"
	"flag"
	"io"
	"log/slog"

	"github.com/sluicehq/sluice/internal/controlplane"
	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/secretfile"
)

func main() { flagenv.Main("controlplane", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := flagenv.NewEnv(getenv)
	s := controlplane.DefaultSettings()
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	s.Flags(fs, e)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := e.Err(); err != nil { // a variable that does not parse stops the binary, named
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	var err error
	if s.OperatorKeyFunc, err = secretfile.FromEnv(getenv, "SLUICE_OPERATOR_KEY"); err != nil {
		return err
	}
	if s.DeciderKeyFunc, err = secretfile.FromEnv(getenv, "SLUICE_DECIDER_KEY"); err != nil {
		return err
	}
	s.OperatorKey, s.DeciderKey = getenv("SLUICE_OPERATOR_KEY"), getenv("SLUICE_DECIDER_KEY")
	s.Logger, s.Stdout, s.Getenv = slog.New(slog.NewJSONHandler(stderr, nil)), stdout, getenv
	return controlplane.Serve(ctx, s)
}
