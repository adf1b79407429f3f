//go:build !unix

package pgserver

import "os/exec"

// runAs does nothing where there is no root to step down from.
func runAs(*exec.Cmd, uint32, uint32) {}
