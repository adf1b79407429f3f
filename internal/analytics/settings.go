package analytics

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/kafkasec"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/tlsfiles"
	"github.com/sluicehq/sluice/migrations"
)

// Settings are the analytics binary's: its health and metrics listener,
// database, Kafka and rollups, one field per setting. DefaultSettings
// gives each its default; Flags defines them; Serve runs them.
type Settings struct {
	Addr            string // health and metrics
	TLSCert, TLSKey string
	DatabaseURL     string
	Brokers         string // comma-separated
	Topic, Group    string
	Kafka           *kafkasec.Config // TLS and SASL; nil: plaintext
	BatchSize       int
	TopK            int
	Retention       time.Duration
	HourRetention   time.Duration

	Logger *slog.Logger // nil: JSON to Stderr
	Stdout io.Writer    // where the listening address is printed; nil: none
}

// DefaultSettings returns every setting at its default.
func DefaultSettings() Settings {
	return Settings{Addr: "127.0.0.1:8082", DatabaseURL: "postgres://postgres@127.0.0.1:5432/sluice?sslmode=disable",
		Brokers: "127.0.0.1:9092", Topic: "sluice.decisions", Group: "sluice-analytics", BatchSize: DefaultBatchSize, TopK: DefaultTopK,
		Retention: 30 * 24 * time.Hour, HourRetention: DefaultHourRetention}
}

// Flags defines a flag for each setting on fs, its default the variable
// named below where it is set, else s's value. The flags and variables:
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
func (s *Settings) Flags(fs *flag.FlagSet, e *flagenv.Env) {
	fs.StringVar(&s.Addr, "addr", e.String("SLUICE_ANALYTICS_ADDR", s.Addr), "listen address of health and metrics")
	fs.StringVar(&s.TLSCert, "tls-cert", e.String("SLUICE_ANALYTICS_TLS_CERT", s.TLSCert), "PEM certificate: with -tls-key health and metrics are served over HTTPS (reread when the files change)")
	fs.StringVar(&s.TLSKey, "tls-key", e.String("SLUICE_ANALYTICS_TLS_KEY", s.TLSKey), "PEM private key of -tls-cert")
	fs.StringVar(&s.DatabaseURL, "database-url", e.String("DATABASE_URL", s.DatabaseURL), "PostgreSQL URL")
	fs.StringVar(&s.Brokers, "kafka-brokers", e.String("KAFKA_BROKERS", s.Brokers), "comma-separated Kafka brokers")
	fs.StringVar(&s.Topic, "events-topic", e.String("SLUICE_EVENTS_TOPIC", s.Topic), "topic of decision events")
	s.Kafka = kafkasec.Register(fs, e)
	fs.StringVar(&s.Group, "group", e.String("SLUICE_ANALYTICS_GROUP", s.Group), "consumer group")
	fs.IntVar(&s.BatchSize, "batch-size", e.Int("SLUICE_ANALYTICS_BATCH", s.BatchSize), "most events per PostgreSQL transaction")
	fs.IntVar(&s.TopK, "top-clients", e.Int("SLUICE_TOP_CLIENTS", s.TopK), "clients tracked per (tenant, rule, hour)")
	fs.DurationVar(&s.Retention, "retention", e.Duration("SLUICE_RETENTION", s.Retention), "how long minute rollups and the top clients of each hour are kept")
	fs.DurationVar(&s.HourRetention, "hour-retention", e.Duration("SLUICE_HOUR_RETENTION", s.HourRetention), "how long hourly rollups and the top clients of each day are kept, at least -retention")
}

// Validate checks every setting that needs no network, naming the flag of
// the first wrong one.
func (s *Settings) Validate() error {
	switch {
	case s.BatchSize <= 0:
		return fmt.Errorf("-batch-size (SLUICE_ANALYTICS_BATCH) %d: want more than 0", s.BatchSize)
	case s.TopK <= 0:
		return fmt.Errorf("-top-clients (SLUICE_TOP_CLIENTS) %d: want more than 0", s.TopK)
	case s.Retention <= 0:
		return fmt.Errorf("-retention (SLUICE_RETENTION) %v: want more than 0", s.Retention)
	case s.HourRetention <= 0:
		return fmt.Errorf("-hour-retention (SLUICE_HOUR_RETENTION) %v: want more than 0", s.HourRetention)
	case strings.TrimSpace(s.Brokers) == "":
		return fmt.Errorf("-kafka-brokers (KAFKA_BROKERS): want at least one broker")
	}
	return nil
}

// Serve runs the analytics consumer of s until ctx ends: the migrations,
// the consumer, and its health and metrics listener.
func Serve(ctx context.Context, s Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	logger, stdout := s.Logger, s.Stdout
	if logger == nil {
		logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if stdout == nil {
		stdout = io.Discard
	}
	sec := s.Kafka
	if sec == nil {
		sec = &kafkasec.Config{}
	}
	dialer, err := sec.Dialer()
	if err != nil {
		return err
	}
	if err := migrations.Apply(s.DatabaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()

	reg := telemetry.NewRegistry()
	c := NewConsumer(Config{Brokers: strings.Split(s.Brokers, ","), Topic: s.Topic, Group: s.Group, Dialer: dialer,
		Store: NewStore(pool, s.TopK), BatchSize: s.BatchSize, Retention: s.Retention, HourRetention: s.HourRetention, Registerer: reg, Logger: logger})
	mux := http.NewServeMux()
	db := telemetry.NewProbe(func(ctx context.Context) error { return migrations.Check(ctx, pool) }, time.Second)
	telemetry.Mount(mux, reg, func() bool { return c.Ready() && db.OK() }, nil)
	ln, scheme, err := tlsfiles.Listen(s.Addr, s.TLSCert, s.TLSKey, "")
	if err != nil {
		return err
	}
	// Its port serves health and metrics alone: no request has a body worth
	// waiting for.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	fmt.Fprintf(stdout, "analytics consuming %s as %s; metrics on %s://%s\n", s.Topic, s.Group, scheme, ln.Addr())
	served := make(chan error, 1)
	go func() { served <- telemetry.Serve(ctx, srv, ln, 10*time.Second) }()
	err = c.Run(ctx)
	if serr := <-served; err == nil {
		err = serr
	}
	return err
}
