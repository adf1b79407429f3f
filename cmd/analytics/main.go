// Command analytics consumes the deciders' decision events from Kafka and
// rolls them up into PostgreSQL for the control plane's reports API, with
// /healthz, /readyz and /metrics.
//
// Its flags and variables are internal/analytics's Settings.Flags, and
// docs/configuration.md; flags override the environment. DATABASE_URL and
// KAFKA_SASL_PASSWORD may instead be read from the file their NAME_FILE
// variable names (Docker's and Kubernetes' secrets).
package main

import (
	"context"
	"flag"
	"io"
	"log/slog"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/flagenv"
)

func main() { flagenv.Main("analytics", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := flagenv.NewEnv(getenv)
	s := analytics.DefaultSettings()
	fs := flag.NewFlagSet("analytics", flag.ContinueOnError)
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
	s.Logger, s.Stdout = slog.New(slog.NewJSONHandler(stderr, nil)), stdout
	return analytics.Serve(ctx, s)
}
