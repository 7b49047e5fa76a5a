package cpu

import (
	"os"
	"regexp"
	"testing"
)

// TestIsAMD checks the CPUID vendor test against the vendor the operating system reports
// (Linux's /proc/cpuinfo; skipped elsewhere).
func TestIsAMD(t *testing.T) {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo to compare with: %v", err)
	}
	m := regexp.MustCompile(`(?m)^vendor_id\s*:\s*(\S+)`).FindSubmatch(info)
	if m == nil {
		t.Skip("/proc/cpuinfo names no vendor_id")
	}
	if want := string(m[1]) == "AuthenticAMD"; isAMD() != want {
		t.Errorf("isAMD() = %v, /proc/cpuinfo says vendor %s", isAMD(), m[1])
	}
	t.Logf("vendor %s, BF16 path taken: %v", m[1], RoundsBF16Activations())
}
