//go:build !linux

package main

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// The harness reads CPU times from /proc and loads servers with
// internal/loadgen, both Linux-only.

type cpuTimes struct{ stat, sched time.Duration }

func procCPU(pid int) (cpuTimes, error) {
	return cpuTimes{}, errors.New("bench: CPU accounting needs Linux /proc")
}

func machineBusy() time.Duration { return 0 }

func childAttr(cmd *exec.Cmd) {}

func dontFragment(network, address string, c syscall.RawConn) error {
	return errors.New("bench: df needs Linux")
}
