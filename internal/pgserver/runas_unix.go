//go:build unix

package pgserver

import (
	"os/exec"
	"syscall"
)

// runAs makes cmd run as the user uid of group gid.
func runAs(cmd *exec.Cmd, uid, gid uint32) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
}
