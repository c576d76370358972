package procstat

import (
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's CPU time as getrusage(2) tells it: another
// source than the /proc files under test.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Burning CPU shows in both of the process's figures and in the machine's.
// The spin lasts 200 ms of this process's CPU time, not of the wall clock,
// so a machine busy with other work stretches it rather than failing it.
func TestProcessCPU(t *testing.T) {
	c0, err := Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	m0 := MachineBusy()
	x := 0
	for start, deadline := cpuTime(t), time.Now().Add(time.Minute); cpuTime(t)-start < 200*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatal("200 ms of CPU time took over a minute")
		}
		for range 100_000 {
			x++
		}
	}
	c1, err := Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := c1.Sched - c0.Sched; d < 100*time.Millisecond {
		t.Errorf("schedstat grew %v over 200 ms of CPU time spinning", d)
	}
	if d := c1.Stat - c0.Stat; d < 50*time.Millisecond {
		t.Errorf("utime+stime grew %v over 200 ms of CPU time spinning", d)
	}
	if MachineBusy()-m0 < 50*time.Millisecond {
		t.Error("the machine's busy time did not grow")
	}
	if _, err := Process(1 << 30); err == nil {
		t.Error("no error for a missing process")
	}
	_ = x
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		in := slices.Clone(c.xs)
		if got := Median(c.xs); got != c.want || !slices.Equal(in, c.xs) {
			t.Errorf("Median(%v) = %v, want %v, input unchanged", in, got, c.want)
		}
	}
}
