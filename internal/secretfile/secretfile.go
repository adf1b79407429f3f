// Package secretfile follows a secret kept in a file — a Kubernetes
// secret's volume, a Docker secret — rereading it when the file changes,
// so that a key is rotated by rewriting the file, without a restart.
package secretfile

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Recheck is how often Get looks at the file again, at most.
const Recheck = time.Second

// File is a secret read from a file. Get is safe for concurrent use.
type File struct {
	path string
	now  func() time.Time

	mu      sync.Mutex // one reread at a time
	next    atomic.Int64
	modTime time.Time
	size    int64
	value   atomic.Pointer[string]
}

// Open reads the secret at path: the file's text without surrounding
// white space. It fails when the file cannot be read or holds nothing.
func Open(path string) (*File, error) {
	return open(path, time.Now)
}

func open(path string, now func() time.Time) (*File, error) {
	f := &File{path: path, now: now}
	if err := f.reread(); err != nil {
		return nil, err
	}
	return f, nil
}

// Get returns the secret, rereading the file when its modification time or
// size changed since the last read (looked at once per Recheck). When a
// reread fails (the file gone, empty or unreadable mid-rotation) the last
// secret stays.
func (f *File) Get() string {
	if now := f.now().UnixNano(); now >= f.next.Load() && f.mu.TryLock() {
		f.next.Store(now + int64(Recheck))
		_ = f.reread()
		f.mu.Unlock()
	}
	return *f.value.Load()
}

// reread reads the file when it changed; f.mu is held, or f is new.
func (f *File) reread() error {
	info, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("secretfile: %w", err)
	}
	if f.value.Load() != nil && info.ModTime().Equal(f.modTime) && info.Size() == f.size {
		return nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return fmt.Errorf("secretfile: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return fmt.Errorf("secretfile: %s is empty", f.path)
	}
	f.modTime, f.size = info.ModTime(), info.Size()
	f.value.Store(&s)
	return nil
}

// FromEnv follows the file that the variable name+"_FILE" names, for a
// secret that must rotate without a restart; get is nil when that
// variable is unset (the secret, if any, is name's value, fixed).
func FromEnv(getenv func(string) string, name string) (get func() string, err error) {
	path := getenv(name + "_FILE")
	if path == "" {
		return nil, nil
	}
	f, err := Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s_FILE: %w", name, err)
	}
	return f.Get, nil
}
