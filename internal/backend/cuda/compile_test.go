package cuda

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestKernelsCompileWithoutDevice compiles the embedded kernels with whatever NVRTC is
// installed, no GPU needed, so a machine without one (Debian's libnvrtc11.2 package) can
// check CUDA sources before they reach a device. It is slow (minutes on two cores) and runs
// only with KVASIR_NVRTC_COMPILE=1; KVASIR_NVRTC_ARCH picks the architecture (sm_90), and
// KVASIR_NVRTC_PROGRAMS (a comma-separated list such as lora.cu,rope.cu) compiles only
// those programs, uncached.
func TestKernelsCompileWithoutDevice(t *testing.T) {
	if os.Getenv("KVASIR_NVRTC_COMPILE") != "1" {
		t.Skip("set KVASIR_NVRTC_COMPILE=1 to compile the kernels with the installed NVRTC")
	}
	nv, err := OpenNVRTC()
	if err != nil {
		t.Fatal(err)
	}
	arch := os.Getenv("KVASIR_NVRTC_ARCH")
	if arch == "" {
		arch = "sm_90"
	}
	t0 := time.Now()
	if only := os.Getenv("KVASIR_NVRTC_PROGRAMS"); only != "" {
		progs, err := KernelPrograms()
		if err != nil {
			t.Fatal(err)
		}
		names := strings.Split(only, ",")
		compiled := 0
		for _, p := range progs {
			if !slices.Contains(names, p.Name) {
				continue
			}
			c, err := nv.Compile(p.Name, p.Src, arch, kernelOptions())
			if err != nil {
				t.Fatal(err)
			}
			compiled++
			t.Logf("compiled %s for %s: %d KiB of cubin", p.Name, arch, len(c)>>10)
		}
		if compiled != len(names) {
			t.Fatalf("compiled %d of the %d programs asked (%s)", compiled, len(names), only)
		}
		t.Logf("in %.1f s", time.Since(t0).Seconds())
		return
	}
	cubins, _, err := CompileKernels(nv, CubinCache{}, arch)
	if err != nil {
		t.Fatal(err)
	}
	progs, _ := KernelPrograms()
	if len(cubins) != len(progs) || len(progs) < 2 {
		t.Fatalf("%d cubins for %d programs", len(cubins), len(progs))
	}
	size := 0
	for _, c := range cubins {
		size += len(c)
	}
	t.Logf("compiled %d programs for %s in %.1f s: %d KiB of cubins", len(progs), arch, time.Since(t0).Seconds(), size>>10)
}
