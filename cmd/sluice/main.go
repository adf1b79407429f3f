// Command sluice is Sluice's command-line tool. `sluice dev` runs the system
// in one process; further commands arrive with the control plane.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/internal/devstack"
)

const usage = `usage: sluice <command> [flags]

commands:
  dev    run Sluice in one process on embedded defaults (what make dev runs)
`

// errUsage marks a command-line mistake: exit code 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv); err != nil {
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "dev":
		fs := flag.NewFlagSet("sluice dev", flag.ContinueOnError)
		fs.SetOutput(stderr)
		addr := fs.String("addr", envOr(getenv, "SLUICE_ADDR", "127.0.0.1:8080"), "listen address of the HTTP API (env SLUICE_ADDR)")
		if err := fs.Parse(args[1:]); err != nil {
			return errUsage
		}
		logger := slog.New(slog.NewTextHandler(stderr, nil))
		return devstack.Run(ctx, devstack.Config{Addr: *addr, Out: stdout, Logger: logger})
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usage)
	return errUsage
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
