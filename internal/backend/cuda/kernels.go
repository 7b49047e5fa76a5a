package cuda

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// kernelFiles holds the CUDA C sources of the project's kernels. Each .cu file but
// common.cu is compiled as its own program, with common.cu (the shared helpers) and every
// .cuh file (templates more than one program instantiates) in front.
//
//go:embed kernels/*.cu kernels/*.cuh
var kernelFiles embed.FS

// kernelOptions returns the NVRTC options every kernel build uses (besides --gpu-arch).
func kernelOptions() []string { return []string{"--std=c++17"} }

// Program is one NVRTC program: common.cu, the .cuh files, then one kernel file.
type Program struct {
	Name string // the kernel file's name, e.g. "gemvq.cu"
	Src  string
}

// KernelPrograms returns one program per embedded kernel file (common.cu excepted), in name
// order, each preceded by common.cu and the .cuh files. The programs compile independently:
// in parallel at start, and after an edit only the programs whose text changed compile
// again (the cache is keyed by each program's source).
func KernelPrograms() ([]Program, error) {
	entries, err := fs.ReadDir(kernelFiles, "kernels")
	if err != nil {
		return nil, fmt.Errorf("cuda kernels: %w", err)
	}
	var head strings.Builder
	var names []string
	for _, n := range append([]string{"common.cu"}, entryNames(entries, ".cuh")...) {
		src, err := kernelFiles.ReadFile("kernels/" + n)
		if err != nil {
			return nil, fmt.Errorf("cuda kernels: %w", err)
		}
		fmt.Fprintf(&head, "// ---- %s ----\n#line 1 \"%s\"\n%s\n", n, n, src)
	}
	for _, n := range entryNames(entries, ".cu") {
		if n != "common.cu" {
			names = append(names, n)
		}
	}
	progs := make([]Program, 0, len(names))
	for _, n := range names {
		src, err := kernelFiles.ReadFile("kernels/" + n)
		if err != nil {
			return nil, fmt.Errorf("cuda kernels: %w", err)
		}
		progs = append(progs, Program{Name: n, Src: fmt.Sprintf("%s// ---- %s ----\n#line 1 \"%s\"\n%s\n", head.String(), n, n, src)})
	}
	return progs, nil
}

// entryNames returns the names of the entries ending in ext, sorted.
func entryNames(entries []fs.DirEntry, ext string) []string {
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ext) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// KernelSource returns every embedded kernel file as one text (common.cu and the .cuh files
// first, once), for tests that look for a kernel's definition.
func KernelSource() (string, error) {
	progs, err := KernelPrograms()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for i, p := range progs {
		if i > 0 { // the head once
			p.Src = p.Src[strings.Index(p.Src, "// ---- "+p.Name+" ----"):]
		}
		b.WriteString(p.Src)
	}
	return b.String(), nil
}

// Kernels is the project's kernel module loaded on one device.
type Kernels struct {
	mod *Module
	// Arch is the architecture the cubins were built for, e.g. "sm_90".
	Arch string
	// CompileTime is how long getting the cubins took (compiles or cache reads).
	CompileTime time.Duration
	// CacheHit reports whether every cubin came from the on-disk cache.
	CacheHit bool
}

// CompileKernels returns the cubin of every kernel program for arch, from the cache or
// compiled, up to GOMAXPROCS programs at a time; hit reports whether all came from the
// cache. An error names the program whose compile failed, with the compiler's log.
func CompileKernels(nv *NVRTC, cache CubinCache, arch string) (cubins [][]byte, hit bool, err error) {
	progs, err := KernelPrograms()
	if err != nil {
		return nil, false, err
	}
	cubins = make([][]byte, len(progs))
	hits := make([]bool, len(progs))
	errs := make([]error, len(progs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, p := range progs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cubins[i], hits[i], errs[i] = nv.CompileCached(cache, p.Name, p.Src, arch, kernelOptions())
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, false, fmt.Errorf("cuda kernels: %w", err)
	}
	return cubins, !slices.Contains(hits, false), nil
}

// LoadKernels compiles the embedded kernels for the device's compute capability (or reads
// the cubins from cache) and loads them (inside Do).
func (dv *Device) LoadKernels(nv *NVRTC, cache CubinCache) (*Kernels, error) {
	arch := dv.info.Arch()
	t0 := time.Now()
	cubins, hit, err := CompileKernels(nv, cache, arch)
	if err != nil {
		return nil, err
	}
	k := &Kernels{Arch: arch, CompileTime: time.Since(t0), CacheHit: hit}
	if k.mod, err = dv.LoadModule(cubins...); err != nil {
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
