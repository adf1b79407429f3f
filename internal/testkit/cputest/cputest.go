// Package cputest keeps the tests that burn the machine's CPU, or that
// hold a decider to its latency budget, from running at the same time:
// `go test ./...` runs several packages' test binaries at once, and one
// package's CPU burners would otherwise starve another's decider past its
// budget, failing a test for a load it never set up.
package cputest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/filelock"
)

// Alone waits until no other test that called Alone, in this or any other
// test process on the machine, is running, and holds the machine until t
// ends. Call it first, before the test starts its load.
func Alone(t testing.TB) {
	t.Helper()
	release, err := filelock.Lock(filepath.Join(os.TempDir(), "sluice-test-cpu.lock"))
	if err != nil {
		t.Fatalf("cputest: %v", err)
	}
	t.Cleanup(release)
}

// ProcessCPU is the CPU this process has used, user and system: what a
// benchmark divides by its operations for its CPU per operation.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
