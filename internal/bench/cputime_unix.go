//go:build unix

package bench

import (
	"syscall"
	"time"
)

// ProcessCPU returns the CPU time (user and system) the process has used so far; ok is
// false where it cannot be read. On a machine shared with other work a run's CPU time
// moves less than its wall time.
func ProcessCPU() (d time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
