package main

import (
	"os/exec"
	"syscall"
)

// childAttr makes a child server die with the harness: if the harness is
// killed, the kernel sends the child SIGKILL. (The child also stops by
// itself after its maximum duration.)
func childAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
