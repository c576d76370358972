package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// CPU time accounting from /proc, as limits.md measured it.
//
// /proc/PID/stat utime+stime is what getrusage reports: clock ticks
// (USER_HZ, 100 per second) summed over every thread the process ever had.
// /proc/PID/task/*/schedstat gives each live thread's on-CPU time in
// nanoseconds; summed, it is the precise cross-check (a thread that exited
// inside the window would be missing from it, which Go servers do not do).
// Softirq work done inside a task's system calls (on loopback: delivering
// the datagrams it sends) counts as that task's system time in both.

// userHZ is the unit of /proc/PID/stat times. It is 100 on every Linux
// architecture Go supports (the kernel's USER_HZ, independent of CONFIG_HZ).
const userHZ = 100

// cpuTimes is one process's CPU time at an instant.
type cpuTimes struct {
	stat  time.Duration // utime+stime, tick resolution
	sched time.Duration // sum of the threads' schedstat run time
}

// procCPU reads pid's CPU times.
func procCPU(pid int) (cpuTimes, error) {
	var t cpuTimes
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return t, err
	}
	s := string(b)
	// Fields after the command name (which may hold spaces and parens):
	// state is field 3, utime 14 and stime 15 (1-based).
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return t, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return t, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return t, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	t.stat = time.Duration(ut+st) * time.Second / userHZ
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited meanwhile
		}
		if fs := strings.Fields(string(b)); len(fs) > 0 {
			ns, _ := strconv.ParseInt(fs[0], 10, 64)
			t.sched += time.Duration(ns)
		}
	}
	return t, nil
}

// machineBusy returns the time all CPUs together spent neither idle nor
// waiting (idle, iowait and steal excluded), from /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy int64
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		if i != 3 && i != 4 && i != 7 { // idle, iowait, steal
			busy += v
		}
	}
	return time.Duration(busy) * time.Second / userHZ
}

// childAttr makes a child server die with the harness: if the harness is
// killed, the kernel sends the child SIGKILL. (The child also stops by
// itself after its maximum duration.)
func childAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// dontFragment is a batchio Control hook that sets the don't-fragment bit
// on a socket's datagrams (IP_PMTUDISC_PROBE: DF set, path MTU ignored).
// Without DF the kernel picks an IP ID for every datagram from a table
// hashed by destination (__ip_select_ident), which at 100k destinations is
// a cache miss per packet.
func dontFragment(network, address string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
	}); err != nil {
		return err
	}
	return serr
}
