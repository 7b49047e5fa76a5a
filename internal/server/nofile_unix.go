//go:build unix

package server

import "syscall"

// openFileLimit is the process's limit of open files (RLIMIT_NOFILE, its soft value, which
// the Go runtime raises to the hard one at start).
func openFileLimit() (int, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 0, false
	}
	if rl.Cur > 1<<30 {
		return 1 << 30, true
	}
	return int(rl.Cur), true
}
