package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/devstack"
	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/kafkasec"
	"github.com/sluicehq/sluice/internal/rlheaders"
	"github.com/sluicehq/sluice/internal/tracing"
)

// runDev runs sluice dev: the whole system in one process, on the
// services the environment names or embedded ones.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("sluice dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	e := flagenv.NewEnv(getenv)
	addr := fs.String("addr", e.String("SLUICE_ADDR", "127.0.0.1:8080"), "listen address of the HTTP API (env SLUICE_ADDR)")
	reset := fs.Bool("reset", false, "start from a clean demo: the dev database, keys and events made afresh")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	deltas := e.Duration("SLUICE_DELTA_INTERVAL", 10*time.Second)
	budget := e.Duration("SLUICE_DECISION_BUDGET", 50*time.Millisecond)
	cluster, sentinel := e.Bool("SLUICE_REDIS_CLUSTER", false), e.Bool("SLUICE_REDIS_SENTINEL", false)
	if err := e.Err(); err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	if deltas <= 0 {
		fmt.Fprintf(stderr, "SLUICE_DELTA_INTERVAL=%v: want a positive duration such as 10s\n", deltas)
		return errUsage
	}
	if budget <= 0 {
		fmt.Fprintf(stderr, "SLUICE_DECISION_BUDGET=%v: want a positive duration such as 50ms\n", budget)
		return errUsage
	}
	headers, err := rlheaders.ParseStyle(e.String("SLUICE_RATE_LIMIT_HEADERS", "ietf"))
	if err != nil {
		fmt.Fprintf(stderr, "SLUICE_RATE_LIMIT_HEADERS: %v\n", err)
		return errUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	tracer, stopTracing, err := tracing.Setup(ctx, "sluice-dev", getenv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	defer stopTracing()
	return devstack.Run(ctx, devstack.Config{Addr: *addr, Out: stdout, Logger: logger, Tracer: tracer,
		DatabaseURL: getenv("DATABASE_URL"), RedisURL: getenv("REDIS_URL"), RedisCluster: cluster, RedisSentinel: sentinel, RedisPrefix: getenv("SLUICE_REDIS_PREFIX"),
		GRPCAddr: e.String("SLUICE_GRPC_ADDR", "127.0.0.1:8089"), KafkaBrokers: getenv("KAFKA_BROKERS"), KafkaSec: kafkasec.FromEnv(getenv), EventsTopic: getenv("SLUICE_EVENTS_TOPIC"), DeltaInterval: deltas, Budget: budget, Headers: headers,
		Dir: getenv("SLUICE_DEV_DIR"), Reset: *reset})
}
