// Package procstat reads CPU time the way this project measures servers:
// a process's own CPU time from /proc (never wall time), and how busy the
// whole machine is, so a benchmark can wait for a quiet machine and flag
// runs that other work disturbed. It is used by measurement harnesses
// (bench/, batchio's echo comparison), not by the server.
package procstat

import (
	"context"
	"runtime"
	"slices"
	"time"
)

// CPU is one process's CPU time at an instant.
type CPU struct {
	// Stat is utime+stime from /proc/PID/stat: what getrusage reports,
	// summed over every thread the process ever had, in clock ticks
	// (10 ms).
	Stat time.Duration
	// Sched is the sum of the live threads' on-CPU time from
	// /proc/PID/task/*/schedstat, in nanoseconds: the precise cross-check.
	Sched time.Duration
}

// WaitQuiet waits, up to max, until the machine is nearly idle (under 10 %
// of its CPUs busy over 300 ms), so other processes do not distort a run.
// It reports whether it saw the machine quiet.
func WaitQuiet(ctx context.Context, max time.Duration) bool {
	deadline := time.Now().Add(max)
	for ctx.Err() == nil {
		b0, t0 := MachineBusy(), time.Now()
		time.Sleep(300 * time.Millisecond)
		busy := float64(MachineBusy()-b0) / float64(time.Since(t0)) / float64(runtime.NumCPU())
		if busy < 0.10 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
	return false
}

// Median is the median of xs (the mean of the middle two for an even
// count; 0 for none), the figure both harnesses report over repetitions.
// xs is not reordered.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}
