package deploy

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/cputest"
	"github.com/sluicehq/sluice/internal/testkit/pgtest"
	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// `make dev` in a terminal stops on Ctrl-C with exit code 0, as the
// Makefile says: the Ctrl-C is typed into a pseudo-terminal (script(1)),
// and neither make nor sluice dev may die of it.
func TestMakeDevExitsZeroOnCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	cputest.Alone(t) // it builds every binary: no budget-bound test beside it
	for _, tool := range []string{"script", "make", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	_, prefix := redistest.Client(t)
	cmd := exec.Command("script", "-qefc", "make dev", "/dev/null")
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "SLUICE_ADDR=127.0.0.1:0", "SLUICE_GRPC_ADDR=127.0.0.1:0", "SLUICE_DEV_DIR="+t.TempDir(),
		"DATABASE_URL="+pgtest.Schema(t), "REDIS_URL=redis://"+redistest.Addr(t), "SLUICE_REDIS_PREFIX="+prefix, "KAFKA_BROKERS=")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	running := make(chan struct{})
	var seen strings.Builder
	go func() {
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			seen.WriteString(lines.Text() + "\n")
			if strings.Contains(lines.Text(), "Ctrl-C stops it") {
				close(running)
				break
			}
		}
		_, _ = bufio.NewReader(out).WriteTo(&seen)
	}()
	select {
	case <-running:
	case <-time.After(5 * time.Minute):
		t.Fatalf("make dev never printed its banner:\n%s", seen.String())
	}
	if _, err := stdin.Write([]byte{3}); err != nil { // Ctrl-C, typed
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("make dev exited %d on Ctrl-C, want 0", exit.ExitCode())
		} else if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("make dev did not stop within 30 s of Ctrl-C")
	}
}
