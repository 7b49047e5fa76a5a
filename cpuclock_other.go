//go:build !unix

package kvasir

import "time"

// processCPU returns nil: the process's CPU time is not read here, and speculation's step
// costs are timed on the wall clock.
func processCPU() func() time.Duration { return nil }
