//go:build !linux

package main

import "os/exec"

// The harness reads CPU times from /proc and loads servers with
// internal/loadgen, both Linux-only.

func childAttr(cmd *exec.Cmd) {}
