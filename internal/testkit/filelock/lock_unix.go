//go:build unix

package filelock

import (
	"os"
	"syscall"
)

// Lock waits for an exclusive advisory lock on the file at path, which
// the kernel also releases when the process ends, however it ends; the
// returned function releases it.
func Lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}
