package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// benchCommand is the binary `sluice bench` runs: the load generator is a
// program of its own (cmd/sluice-bench), so that the CLI carries none of
// it. It is looked for beside this binary (make build puts both in bin/),
// then on PATH.
const benchCommand = "sluice-bench"

// exitCode is a command run for the CLI that exited with code: the CLI
// exits with it too, the command having said why.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("%s exited with code %d", benchCommand, int(c)) }

// runBench runs sluice-bench with args, its output and input the CLI's.
// SLUICE_DECIDER and SLUICE_CHECK_KEY are passed as getenv has them, so
// that sluice dev's keys serve it as they serve the CLI.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	path := ""
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), benchCommand); isFile(p) {
			path = p
		}
	}
	if path == "" {
		p, err := exec.LookPath(benchCommand)
		if err != nil {
			fmt.Fprintf(stderr, "sluice bench runs %s, which is neither beside sluice nor on PATH: make build puts it in bin/, go install ./cmd/%s installs it\n",
				benchCommand, benchCommand)
			return errUsage
		}
		path = p
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = os.Environ()
	for _, k := range []string{"SLUICE_DECIDER", "SLUICE_CHECK_KEY"} {
		if v := getenv(k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	err := cmd.Run()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		if ee.ExitCode() == 2 {
			return errUsage
		}
		return exitCode(ee.ExitCode())
	}
	return err
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
