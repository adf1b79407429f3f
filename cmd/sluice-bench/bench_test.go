package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/devstack"
	"github.com/sluicehq/sluice/internal/testkit/devtest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// startDev runs sluice dev's stack in-process on free ports until the
// test ends, and returns its banner once printed.
func startDev(t *testing.T) string {
	t.Helper()
	_, prefix := redistest.Client(t)
	banner, _ := devtest.Start(t, func(ctx context.Context, out io.Writer) error {
		return devstack.Run(ctx, devstack.Config{Addr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DatabaseURL: pgtest.Schema(t),
			RedisURL: "redis://" + redistest.Addr(t), RedisPrefix: prefix, Dir: t.TempDir(), DeltaInterval: 10 * time.Second,
			// Counted exactly however loaded the machine.
			Budget: 5 * time.Second, Out: out, Logger: slog.New(slog.DiscardHandler)})
	})
	return banner
}

// TestBenchAgainstDev runs sluice-bench briefly over HTTP, gRPC and the
// coalescing SDK.
func TestBenchAgainstDev(t *testing.T) {
	banner := startDev(t)
	env := map[string]string{"SLUICE_DECIDER": regexp.MustCompile(`API\s+(http://\S+)`).FindStringSubmatch(banner)[1],
		"SLUICE_CHECK_KEY": regexp.MustCompile(`check key\s+(\S+)`).FindStringSubmatch(banner)[1]}
	grpcAddr := regexp.MustCompile(`gRPC\s+(\S+)`).FindStringSubmatch(banner)[1]
	for _, args := range [][]string{{"-n", "300", "-c", "4", "-keys", "20", "-json"}, {"-grpc", grpcAddr, "-n", "300", "-c", "4", "-keys", "20", "-json"},
		{"-coalesce", "-n", "300", "-c", "4", "-keys", "20", "-json"}, {"-rls", grpcAddr, "-domain", "demo", "-n", "300", "-c", "4", "-keys", "20", "-json"},
		{"-grpc", grpcAddr, "-raw", "-n", "300", "-c", "4", "-keys", "20", "-json"}, {"-rls", grpcAddr, "-domain", "demo", "-raw", "-n", "300", "-c", "4", "-keys", "20", "-json"}} {
		var out strings.Builder
		if err := run(context.Background(), args, &out, io.Discard, func(k string) string { return env[k] }); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var res benchResult
		if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
			t.Fatalf("%v: %q", args, out.String())
		}
		// 20 ids × 10 per minute (the demo's free tier): 200 allowed, the rest rejected.
		if res.Decisions != 300 || res.Errors != 0 || res.Allowed+res.Rejected != 300 || res.Allowed > 200 || res.DecisionsPerS <= 0 {
			t.Fatalf("%v: %+v", args, res)
		}
	}
	// gubernator's API carries its own limit, 10^6 a second: all admitted.
	for _, args := range [][]string{{"-gubernator", grpcAddr, "-n", "300", "-c", "4", "-keys", "20", "-json"},
		{"-gubernator", grpcAddr, "-raw", "-n", "300", "-c", "4", "-keys", "20", "-json"}} {
		var out strings.Builder
		if err := run(context.Background(), args, &out, io.Discard, func(k string) string { return env[k] }); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var res benchResult
		if err := json.Unmarshal([]byte(out.String()), &res); err != nil || res.Decisions != 300 || res.Allowed != 300 || res.Errors != 0 {
			t.Fatalf("%v: %q", args, out.String())
		}
	}
	// -pid and -redis report what the decider (here, this process) and
	// its Redis took per decision.
	var cpu strings.Builder
	if err := run(context.Background(), []string{"-rls", grpcAddr, "-domain", "demo", "-raw", "-n", "5000", "-c", "4", "-keys", "20",
		"-pid", strconv.Itoa(os.Getpid()), "-redis", redistest.Addr(t), "-json"}, &cpu, io.Discard, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(cpu.String()), &res); err != nil || res.ServerCPUus <= 0 || res.RedisCPUus <= 0 {
		t.Fatalf("CPU per decision: %q, %v", cpu.String(), err)
	}
	// Envoy's service needs its domain; a domain that is not the key's
	// tenant is refused, call by call.
	if err := run(context.Background(), []string{"-rls", grpcAddr}, io.Discard, io.Discard, func(k string) string { return env[k] }); !errors.Is(err, errUsage) {
		t.Errorf("-rls without -domain: %v, want a usage error", err)
	}
	var out strings.Builder
	if err := run(context.Background(), []string{"-rls", grpcAddr, "-domain", "other", "-n", "10", "-json"}, &out, io.Discard, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"errors": 10`) || !strings.Contains(out.String(), "PermissionDenied") {
		t.Errorf("another tenant's domain: %s", out.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"-rls", grpcAddr, "-domain", "other", "-raw", "-n", "10", "-json"}, &out, io.Discard, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"errors": 10`) || !strings.Contains(out.String(), "grpc-status 7") {
		t.Errorf("another tenant's domain, raw: %s", out.String())
	}
	// Arguments after the flags are a mistake (such as two pids to -pid).
	if err := run(context.Background(), []string{"-pid", "1", "2"}, io.Discard, io.Discard, func(k string) string { return env[k] }); !errors.Is(err, errUsage) {
		t.Errorf("bench with an argument: %v, want a usage error", err)
	}
	// -raw is for the gRPC targets only.
	if err := run(context.Background(), []string{"-raw"}, io.Discard, io.Discard, func(k string) string { return env[k] }); !errors.Is(err, errUsage) {
		t.Errorf("-raw over HTTP: %v, want a usage error", err)
	}
}
