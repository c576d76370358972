//go:build !linux

package procstat

import (
	"errors"
	"time"
)

// Process needs Linux's /proc.
func Process(pid int) (CPU, error) {
	return CPU{}, errors.New("procstat: CPU accounting needs Linux /proc")
}

// MachineBusy is 0 without /proc, so WaitQuiet finds every machine quiet.
func MachineBusy() time.Duration { return 0 }
