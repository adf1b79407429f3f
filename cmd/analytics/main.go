// Command analytics consumes the deciders' decision events from Kafka and
// rolls them up into PostgreSQL for the control plane's reports API, with
// /healthz, /readyz and /metrics.
//
// Configuration (flags override the environment):
//
//	-addr           SLUICE_ANALYTICS_ADDR    listen address of health and metrics (default 127.0.0.1:8082)
//	-tls-cert       SLUICE_ANALYTICS_TLS_CERT PEM certificate: with -tls-key health and metrics are served over HTTPS, the pair reread when the files change (default none: plaintext)
//	-tls-key        SLUICE_ANALYTICS_TLS_KEY PEM private key of -tls-cert
//	-database-url   DATABASE_URL             PostgreSQL URL (default postgres://postgres@127.0.0.1:5432/sluice?sslmode=disable)
//	-kafka-brokers  KAFKA_BROKERS            comma-separated brokers (default 127.0.0.1:9092)
//	-events-topic   SLUICE_EVENTS_TOPIC      topic of decision events (default sluice.decisions)
//	-kafka-tls      KAFKA_TLS                connect to Kafka over TLS, verified against the system's roots (default false)
//	-kafka-tls-ca   KAFKA_TLS_CA             PEM CA bundle verifying the brokers (implies -kafka-tls)
//	-kafka-tls-cert KAFKA_TLS_CERT           PEM client certificate for Kafka (implies -kafka-tls)
//	-kafka-tls-key  KAFKA_TLS_KEY            PEM private key of -kafka-tls-cert
//	-kafka-sasl     KAFKA_SASL_MECHANISM     SASL mechanism: plain, scram-sha-256 or scram-sha-512 (default none)
//	-kafka-sasl-username KAFKA_SASL_USERNAME SASL user name
//	                KAFKA_SASL_PASSWORD      SASL password (the environment only: no flag shows it in a process listing)
//	-group          SLUICE_ANALYTICS_GROUP   consumer group (default sluice-analytics)
//	-batch-size     SLUICE_ANALYTICS_BATCH   most events per PostgreSQL transaction (default 50000)
//	-top-clients    SLUICE_TOP_CLIENTS       clients tracked per (tenant, rule, hour) (default 100)
//	-retention      SLUICE_RETENTION         how long minute rollups and the top clients of each hour are kept (default 720h)
//	-hour-retention SLUICE_HOUR_RETENTION    how long hourly rollups and the top clients of each day are kept, at least -retention (default 9600h)
//
// DATABASE_URL and KAFKA_SASL_PASSWORD may instead be read from the file
// their NAME_FILE variable names (Docker's and Kubernetes' secrets).
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
