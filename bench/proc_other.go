//go:build !linux

package main

import (
	"errors"
	"os/exec"
)

// The harness reads CPU times from /proc and loads servers with
// internal/traffic/loadgen, both Linux-only.

func childAttr(cmd *exec.Cmd) {}

var errNoProc = errors.New("needs Linux's /proc")

func udpDrops(ports ...uint16) (uint64, error) { return 0, errNoProc }
func rssBytes(pid int) (uint64, error)         { return 0, errNoProc }
