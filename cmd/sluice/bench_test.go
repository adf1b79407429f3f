package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `sluice bench` runs sluice-bench from PATH (no such binary beside the
// test's), with the arguments, the decider and check key the CLI would
// use, and the exit code it ends with; none found is a usage error that
// says how to get it. Not parallel: it sets PATH.
func TestBenchRunsSluiceBench(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"$* $SLUICE_DECIDER $SLUICE_CHECK_KEY\"\nexit ${BENCH_EXIT:-0}\n"
	if err := os.WriteFile(filepath.Join(dir, benchCommand), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	env := map[string]string{"SLUICE_DECIDER": "http://decider:8080", "SLUICE_CHECK_KEY": "sk_check_x"}
	getenv := func(k string) string { return env[k] }
	var out strings.Builder
	if err := run(context.Background(), []string{"bench", "-n", "5"}, &out, io.Discard, getenv); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "-n 5 http://decider:8080 sk_check_x" {
		t.Errorf("sluice-bench got %q", got)
	}
	for code, want := range map[string]error{"2": errUsage, "1": exitCode(1)} {
		t.Setenv("BENCH_EXIT", code)
		if err := run(context.Background(), []string{"bench"}, io.Discard, io.Discard, getenv); !errors.Is(err, want) {
			t.Errorf("sluice-bench exiting %s: %v, want %v", code, err, want)
		}
	}
	t.Setenv("PATH", t.TempDir())
	var stderr strings.Builder
	if err := run(context.Background(), []string{"bench"}, io.Discard, &stderr, getenv); !errors.Is(err, errUsage) ||
		!strings.Contains(stderr.String(), "go install ./cmd/sluice-bench") {
		t.Errorf("without sluice-bench: %v, %q", err, stderr.String())
	}
}
