//go:build !unix

package bench

import "time"

// ProcessCPU returns the CPU time the process has used so far; ok is false here, where it
// is not read.
func ProcessCPU() (d time.Duration, ok bool) { return 0, false }
