// Command sluice-bench loads a decider, or any Envoy rate limit service or
// gubernator, with checks from concurrent clients and reports decisions/s,
// latency percentiles and, with -pid and -redis, the CPU the server and
// its Redis spent per decision. `sluice bench` runs it: it is a binary of
// its own so that the CLI carries no load generator.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/internal/flagenv"
)

// errUsage marks a command-line mistake (exit code 2).
var errUsage = errors.New("usage")

// defaultAddress is sluice dev's port, where the decider answers when
// SLUICE_DECIDER names none.
const defaultAddress = "http://127.0.0.1:8080"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	getenv, err := flagenv.WithSecretFiles(os.Getenv)
	if err == nil {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr, getenv)
	}
	if errors.Is(err, errUsage) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice bench:", err)
		os.Exit(1)
	}
}

// run is the command with its arguments (without the program's name).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	return runBench(ctx, args, stdout, stderr, getenv)
}
