//go:build unix

package kvasir

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the process has used so far, or nil
// where it cannot be read: the clock speculation's step costs are timed on with the CPU
// backend (engine.Config.StepClock).
func processCPU() func() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return nil
	}
	return func() time.Duration {
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
}
