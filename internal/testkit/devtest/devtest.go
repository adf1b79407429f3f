// Package devtest runs sluice dev's stack for a test and hands it the
// banner the stack prints: its addresses and keys.
package devtest

import (
	"bufio"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// Start runs run (sluice dev, printing to out) until the test ends and
// returns its banner, every line up to the one starting "Ctrl-C", once
// printed; the test fails if run returns first, or prints none within a
// minute. stop cancels run's context and returns its error; it may be
// called more than once, and the test's end calls it too, so that nothing
// the stack writes outlives the test's directories.
func Start(t testing.TB, run func(ctx context.Context, out io.Writer) error) (banner string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, pw)
		pw.Close()
		done <- err
	}()
	var once sync.Once
	var result error
	stop = func() error {
		once.Do(func() { cancel(); result = <-done })
		return result
	}
	t.Cleanup(func() { _ = stop() })
	banners := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		var b strings.Builder
		for sc.Scan() { // to the end: the stack's later lines must not block it
			b.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "Ctrl-C") {
				select {
				case banners <- b.String():
				default:
				}
			}
		}
	}()
	select {
	case banner = <-banners:
		return banner, stop
	case err := <-done:
		done <- err // for stop
		t.Fatalf("sluice dev exited before its banner: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("sluice dev printed no banner within a minute")
	}
	return "", stop
}
