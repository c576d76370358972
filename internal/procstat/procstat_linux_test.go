package procstat

import (
	"os"
	"testing"
	"time"
)

// Burning CPU shows in both of the process's figures and in the machine's.
// The loop spins until the process has had 200 ms of CPU, however long a
// shared machine takes to give it that, rather than for 200 ms of wall
// time, of which a busy machine may give it little.
func TestProcessCPU(t *testing.T) {
	c0, err := Process(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	m0 := MachineBusy()
	x := 0
	var c1 CPU
	for deadline := time.Now().Add(time.Minute); ; {
		for end := time.Now().Add(10 * time.Millisecond); time.Now().Before(end); {
			x++
		}
		if c1, err = Process(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		if c1.Sched-c0.Sched >= 200*time.Millisecond || time.Now().After(deadline) {
			break
		}
	}
	if d := c1.Sched - c0.Sched; d < 200*time.Millisecond {
		t.Errorf("schedstat grew %v in a minute of spinning", d)
	}
	if d := c1.Stat - c0.Stat; d < 50*time.Millisecond {
		t.Errorf("utime+stime grew %v over 200 ms of spinning", d)
	}
	if MachineBusy()-m0 < 50*time.Millisecond {
		t.Error("the machine's busy time did not grow")
	}
	if _, err := Process(1 << 30); err == nil {
		t.Error("no error for a missing process")
	}
	_ = x
}
