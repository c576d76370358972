//go:build !linux

package main

import (
	"errors"
	"os/exec"
	"syscall"
)

// The harness reads CPU times from /proc and loads servers with
// internal/loadgen, both Linux-only.

func childAttr(cmd *exec.Cmd) {}

func dontFragment(network, address string, c syscall.RawConn) error {
	return errors.New("bench: df needs Linux")
}
