package cpu

import (
	"os"
	"syscall"
)

// adviseHugePages asks the kernel to back b (huge page aligned) with transparent huge pages.
// It is advice: where the kernel declines (THP disabled), b keeps small pages and the
// copy works the same.
func adviseHugePages(b []byte) {
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}

// adviseSmallPages asks the kernel not to back b with huge pages (for benchmarks that
// compare the two).
func adviseSmallPages(b []byte) {
	_ = syscall.Madvise(b, syscall.MADV_NOHUGEPAGE)
}

// memAvailable returns the memory the kernel reports available (MemAvailable in
// /proc/meminfo), in bytes, and whether it could be read.
func memAvailable() (int64, bool) {
	info, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	return parseMemAvailable(info)
}
