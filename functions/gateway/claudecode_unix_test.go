//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// ownGroup starts cmd in its own process group and kills the group when
// cmd's context ends, and again by the returned func: the package's
// cli-wrapper.cjs runs Claude Code's binary with spawnSync, so killing
// node alone would leave the binary (and any shell it started) running.
func ownGroup(cmd *exec.Cmd) (kill func()) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	kill = func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	cmd.Cancel = func() error { kill(); return nil }
	return kill
}
