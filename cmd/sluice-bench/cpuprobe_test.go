package main

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testkit/redistest"
)

// rusageCPU is this process's user and system CPU time, by getrusage.
func rusageCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// What -pid reads of a process agrees with what the kernel tells the
// process itself, over 300 ms of its CPU.
func TestProcCPUAgreesWithGetrusage(t *testing.T) {
	p0, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	r0 := rusageCPU(t)
	x := 0
	for rusageCPU(t)-r0 < 300*time.Millisecond {
		for i := range 100_000 {
			x += i
		}
	}
	p1, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	r1 := rusageCPU(t)
	if d := (p1 - p0) - (r1 - r0); d < -30*time.Millisecond || d > 30*time.Millisecond {
		t.Fatalf("/proc says %v, getrusage %v (x %d)", p1-p0, r1-r0, x)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("no error for a process that is not there")
	}
}

// What -redis reads only grows, and is Redis's own figure: nonzero.
func TestRedisCPU(t *testing.T) {
	ctx := context.Background()
	a, err := redisCPU(ctx, redistest.Addr(t))
	if err != nil || a <= 0 {
		t.Fatalf("%v, %v", a, err)
	}
	b, err := redisCPU(ctx, redistest.Addr(t))
	if err != nil || b < a {
		t.Fatalf("then %v, %v", b, err)
	}
	if _, err := redisCPU(ctx, "127.0.0.1:1"); err == nil {
		t.Error("no error for a Redis that is not there")
	}
}
