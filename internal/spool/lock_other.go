//go:build !unix

package spool

// lock is a no-op where flock is missing: one process per directory is
// then the operator's to ensure.
func lock(string) (func() error, error) { return func() error { return nil }, nil }
