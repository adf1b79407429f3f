//go:build unix

package filelock

import (
	"path/filepath"
	"testing"
	"time"
)

// A second holder waits until the first releases the lock.
func TestLockWaitsForTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	release, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		r, err := Lock(path)
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	select {
	case <-got:
		t.Fatal("the second Lock returned while the first was held")
	case <-time.After(100 * time.Millisecond): // held: it must still wait
	}
	release()
	select {
	case r := <-got:
		r()
	case <-time.After(10 * time.Second):
		t.Fatal("the second Lock did not return once the first was released")
	}
}
