package procstat

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc times: the kernel's USER_HZ, 100 on every
// Linux architecture Go supports (independent of CONFIG_HZ).
const userHZ = 100

// Process reads pid's CPU times. Softirq work done inside the process's
// system calls (on loopback: delivering the datagrams it sends) counts as
// its system time in both figures.
func Process(pid int) (CPU, error) {
	var c CPU
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return c, err
	}
	s := string(b)
	// Fields after the command name (which may hold spaces and parens):
	// utime is field 14 and stime 15 (1-based).
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return c, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return c, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return c, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	c.Stat = time.Duration(ut+st) * time.Second / userHZ
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited meanwhile
		}
		if fs := strings.Fields(string(b)); len(fs) > 0 {
			ns, _ := strconv.ParseInt(fs[0], 10, 64)
			c.Sched += time.Duration(ns)
		}
	}
	return c, nil
}

// MachineBusy returns the time all CPUs together spent neither idle nor
// waiting (idle, iowait and steal excluded), from /proc/stat.
func MachineBusy() time.Duration {
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
