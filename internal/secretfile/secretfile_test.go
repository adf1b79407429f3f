package secretfile

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// A rewritten file is read again once Recheck has passed on the clock, not
// before; a file emptied or removed mid-rotation leaves the last secret.
func TestRereadsWhenTheFileChanges(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "key")
	write := func(s string, mod time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	write("old-key\n", t0)
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	f, err := open(path, func() time.Time { return time.Unix(0, clock.Load()) })
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Get(); got != "old-key" {
		t.Fatalf("read %q", got)
	}
	write("new-key,old-key\n", t0.Add(time.Minute))
	f.Get() // the first Get looked at the file: the next look is a Recheck later
	if got := f.Get(); got != "old-key" {
		t.Fatalf("before the recheck: %q", got)
	}
	clock.Add(int64(Recheck))
	if got := f.Get(); got != "new-key,old-key" {
		t.Fatalf("after the recheck: %q", got)
	}
	for _, broken := range []func(){
		func() { write("  \n", t0.Add(2*time.Minute)) },
		func() { _ = os.Remove(path) },
	} {
		broken()
		clock.Add(int64(Recheck))
		if got := f.Get(); got != "new-key,old-key" {
			t.Fatalf("after a failed reread: %q", got)
		}
	}
}

func TestOpenRefusesMissingOrEmptyFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "none")); err == nil {
		t.Fatal("opened a missing file")
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(empty); err == nil {
		t.Fatal("opened an empty file")
	}
}
