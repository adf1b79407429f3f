//go:build !unix

package pgtest

// lockFile does nothing where flock is missing: concurrent first starts
// of the shared private server may then race.
func lockFile(string) (func(), error) { return func() {}, nil }
