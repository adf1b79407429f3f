//go:build !unix

package filelock

// Lock does nothing where flock is missing: holders may then overlap.
func Lock(string) (func(), error) { return func() {}, nil }
