package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"
)

// kernelFiles holds the CUDA C sources of the project's kernels. common.cu comes first
// in the compiled program; the others follow in name order.
//
//go:embed kernels/*.cu
var kernelFiles embed.FS

// kernelOptions returns the NVRTC options every kernel build uses (besides --gpu-arch).
func kernelOptions() []string { return []string{"--std=c++17"} }

// KernelSource returns the one CUDA C program made of the embedded kernel files.
func KernelSource() (string, error) {
	entries, err := fs.ReadDir(kernelFiles, "kernels")
	if err != nil {
		return "", fmt.Errorf("cuda kernels: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != "common.cu" {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range append([]string{"common.cu"}, names...) {
		src, err := kernelFiles.ReadFile("kernels/" + n)
		if err != nil {
			return "", fmt.Errorf("cuda kernels: %w", err)
		}
		fmt.Fprintf(&b, "// ---- %s ----\n#line 1 \"%s\"\n%s\n", n, n, src)
	}
	return b.String(), nil
}

// Kernels is the project's kernel module loaded on one device.
type Kernels struct {
	mod *Module
	// Arch is the architecture the cubin was built for, e.g. "sm_90".
	Arch string
	// CompileTime is how long getting the cubin took (compile or cache read).
	CompileTime time.Duration
	// CacheHit reports whether the cubin came from the on-disk cache.
	CacheHit bool
}

// LoadKernels compiles the embedded kernels for the device's compute capability (or reads
// the cubin from cache) and loads them (inside Do).
func (dv *Device) LoadKernels(nv *NVRTC, cache CubinCache) (*Kernels, error) {
	src, err := KernelSource()
	if err != nil {
		return nil, err
	}
	arch := dv.info.Arch()
	t0 := time.Now()
	cubin, hit, err := nv.CompileCached(cache, "kvasir_kernels.cu", src, arch, kernelOptions())
	if err != nil {
		return nil, err
	}
	k := &Kernels{Arch: arch, CompileTime: time.Since(t0), CacheHit: hit}
	if k.mod, err = dv.LoadModule(cubin); err != nil {
		return nil, fmt.Errorf("cuda kernels (%s): %w", arch, err)
	}
	return k, nil
}

// FreeKernels unloads the kernel module (inside Do).
func (dv *Device) FreeKernels(k *Kernels) error {
	if k == nil {
		return nil
	}
	return dv.UnloadModule(k.mod)
}
