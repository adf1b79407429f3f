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
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/analytics"
	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/kafkasec"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/tlsfiles"
	"github.com/sluicehq/sluice/migrations"
)

func main() { flagenv.Main("analytics", run) }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := flagenv.NewEnv(getenv)
	env := e.String
	fs := flag.NewFlagSet("analytics", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", env("SLUICE_ANALYTICS_ADDR", "127.0.0.1:8082"), "listen address of health and metrics")
	tlsCert := fs.String("tls-cert", env("SLUICE_ANALYTICS_TLS_CERT", ""), "PEM certificate: with -tls-key health and metrics are served over HTTPS (reread when the files change)")
	tlsKey := fs.String("tls-key", env("SLUICE_ANALYTICS_TLS_KEY", ""), "PEM private key of -tls-cert")
	dbURL := fs.String("database-url", env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sluice?sslmode=disable"), "PostgreSQL URL")
	brokers := fs.String("kafka-brokers", env("KAFKA_BROKERS", "127.0.0.1:9092"), "comma-separated Kafka brokers")
	topic := fs.String("events-topic", env("SLUICE_EVENTS_TOPIC", "sluice.decisions"), "topic of decision events")
	kafkaSec := kafkasec.Register(fs, e)
	group := fs.String("group", env("SLUICE_ANALYTICS_GROUP", "sluice-analytics"), "consumer group")
	batch := fs.Int("batch-size", e.Int("SLUICE_ANALYTICS_BATCH", analytics.DefaultBatchSize), "most events per PostgreSQL transaction")
	topK := fs.Int("top-clients", e.Int("SLUICE_TOP_CLIENTS", analytics.DefaultTopK), "clients tracked per (tenant, rule, hour)")
	retention := fs.Duration("retention", e.Duration("SLUICE_RETENTION", 30*24*time.Hour), "how long minute rollups and the top clients of each hour are kept")
	hourRetention := fs.Duration("hour-retention", e.Duration("SLUICE_HOUR_RETENTION", analytics.DefaultHourRetention), "how long hourly rollups and the top clients of each day are kept, at least -retention")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := e.Err(); err != nil { // a variable that does not parse stops the binary, named
		return err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	dialer, err := kafkaSec.Dialer()
	if err != nil {
		return err
	}
	if err := migrations.Apply(*dbURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()

	reg := telemetry.NewRegistry()
	c := analytics.NewConsumer(analytics.Config{Brokers: strings.Split(*brokers, ","), Topic: *topic, Group: *group, Dialer: dialer,
		Store: analytics.NewStore(pool, *topK), BatchSize: *batch, Retention: *retention, HourRetention: *hourRetention, Registerer: reg, Logger: logger})
	mux := http.NewServeMux()
	db := telemetry.NewProbe(func(ctx context.Context) error { return migrations.Check(ctx, pool) }, time.Second)
	telemetry.Mount(mux, reg, func() bool { return c.Ready() && db.OK() }, nil)
	ln, scheme, err := tlsfiles.Listen(*addr, *tlsCert, *tlsKey, "")
	if err != nil {
		return err
	}
	// Its port serves health and metrics alone: no request has a body worth
	// waiting for.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	fmt.Fprintf(stdout, "analytics consuming %s as %s; metrics on %s://%s\n", *topic, *group, scheme, ln.Addr())
	served := make(chan error, 1)
	go func() { served <- telemetry.Serve(ctx, srv, ln, 10*time.Second) }()
	err = c.Run(ctx)
	if serr := <-served; err == nil {
		err = serr
	}
	return err
}
