package main

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// childAttr makes a child server die with the harness: if the harness is
// killed, the kernel sends the child SIGKILL. (The child also stops by
// itself after its maximum duration.)
func childAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// udpDrops sums the kernel's receive drops (the last column of
// /proc/net/udp: datagrams dropped because the socket's buffer was full, or
// by a filter) of every IPv4 UDP socket bound to one of the local ports. A
// server with several SO_REUSEPORT sockets has one line per socket. It works the
// same for every server variant, so their kernel drops compare.
func udpDrops(ports ...uint16) (uint64, error) {
	f, err := os.Open("/proc/net/udp")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	want := map[string]bool{}
	for _, p := range ports {
		want[strings.ToUpper(strconv.FormatUint(uint64(p)|0x10000, 16)[1:])] = true
	}
	var sum uint64
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		_, port, ok := strings.Cut(fs[min(1, len(fs)-1)], ":")
		if len(fs) < 13 || !ok || !want[port] {
			continue
		}
		n, err := strconv.ParseUint(fs[len(fs)-1], 10, 64)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, sc.Err()
}

// rssBytes is a process's resident set size (VmRSS in /proc/PID/status).
func rssBytes(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, os.ErrNotExist
}
