// Package filelock holds a lock on a file, shared by every process of
// the machine: the tests that must not overlap (cputest) and the first
// start of a server they share (pgtest).
package filelock
