package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"
)

// NVRTC holds the runtime compiler's entry points, bound from libnvrtc.
type NVRTC struct {
	lib *library

	nvrtcVersion           func(major, minor *int32) int32
	nvrtcGetErrorString    func(r int32) *byte
	nvrtcCreateProgram     func(p *uintptr, src *byte, name *byte, nHeaders int32, headers, names unsafe.Pointer) int32
	nvrtcDestroyProgram    func(p *uintptr) int32
	nvrtcCompileProgram    func(p uintptr, nOpts int32, opts unsafe.Pointer) int32
	nvrtcGetProgramLogSize func(p uintptr, n *uint64) int32
	nvrtcGetProgramLog     func(p uintptr, log *byte) int32
	nvrtcGetCUBINSize      func(p uintptr, n *uint64) int32
	nvrtcGetCUBIN          func(p uintptr, cubin *byte) int32

	// Major and Minor are NVRTC's version.
	Major, Minor int
}

// OpenNVRTC loads libnvrtc.so.13, .12, .11.2 or the unversioned library.
func OpenNVRTC() (*NVRTC, error) {
	lib, err := openLibrary("NVRTC", []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"})
	if err != nil {
		return nil, err
	}
	n := &NVRTC{lib: lib}
	err = lib.bind([]symbol{
		{&n.nvrtcVersion, "nvrtcVersion"},
		{&n.nvrtcGetErrorString, "nvrtcGetErrorString"},
		{&n.nvrtcCreateProgram, "nvrtcCreateProgram"},
		{&n.nvrtcDestroyProgram, "nvrtcDestroyProgram"},
		{&n.nvrtcCompileProgram, "nvrtcCompileProgram"},
		{&n.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"},
		{&n.nvrtcGetProgramLog, "nvrtcGetProgramLog"},
		{&n.nvrtcGetCUBINSize, "nvrtcGetCUBINSize"},
		{&n.nvrtcGetCUBIN, "nvrtcGetCUBIN"},
	})
	if err != nil {
		return nil, fmt.Errorf("NVRTC %s: %w", lib.name, err)
	}
	var major, minor int32
	if err := n.check("nvrtcVersion", n.nvrtcVersion(&major, &minor)); err != nil {
		return nil, err
	}
	n.Major, n.Minor = int(major), int(minor)
	return n, nil
}

func (n *NVRTC) check(call string, r int32) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(r), Name: cGoString(n.nvrtcGetErrorString(r))}
}

// Compile compiles CUDA C source src (named name in messages) to a cubin for arch (e.g.
// "sm_90") with the extra options opts. A compile error includes the compiler's log.
func (n *NVRTC) Compile(name, src, arch string, opts []string) ([]byte, error) {
	csrc, cname := cString(src), cString(name)
	var prog uintptr
	if err := n.check("nvrtcCreateProgram", n.nvrtcCreateProgram(&prog, &csrc[0], &cname[0], 0, nil, nil)); err != nil {
		return nil, fmt.Errorf("nvrtc %s: %w", name, err)
	}
	defer n.nvrtcDestroyProgram(&prog)

	all := append([]string{"--gpu-architecture=" + arch}, opts...)
	cOpts := make([][]byte, len(all))
	ptrs := make([]*byte, len(all))
	for i, o := range all {
		cOpts[i] = cString(o)
		ptrs[i] = &cOpts[i][0]
	}
	cerr := n.check("nvrtcCompileProgram", n.nvrtcCompileProgram(prog, int32(len(ptrs)), unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(cOpts)
	runtime.KeepAlive(ptrs)
	runtime.KeepAlive(csrc)
	if cerr != nil {
		return nil, fmt.Errorf("nvrtc %s (%s): %w\n%s", name, arch, cerr, n.log(prog))
	}
	var size uint64
	if err := n.check("nvrtcGetCUBINSize", n.nvrtcGetCUBINSize(prog, &size)); err != nil {
		return nil, fmt.Errorf("nvrtc %s: %w", name, err)
	}
	if size == 0 {
		return nil, fmt.Errorf("nvrtc %s: empty cubin for %s", name, arch)
	}
	cubin := make([]byte, size)
	if err := n.check("nvrtcGetCUBIN", n.nvrtcGetCUBIN(prog, &cubin[0])); err != nil {
		return nil, fmt.Errorf("nvrtc %s: %w", name, err)
	}
	return cubin, nil
}

// log returns the program's compile log.
func (n *NVRTC) log(prog uintptr) string {
	var size uint64
	if n.nvrtcGetProgramLogSize(prog, &size) != 0 || size == 0 {
		return ""
	}
	buf := make([]byte, size)
	if n.nvrtcGetProgramLog(prog, &buf[0]) != 0 {
		return ""
	}
	return goString(buf)
}

// CubinCache stores compiled cubins on disk, keyed by the hash of everything that went
// into them.
type CubinCache struct {
	Dir string // "" disables the cache
}

// DefaultCubinCache returns the cache under os.UserCacheDir()/kvasir/cubin, or a disabled
// cache when there is no user cache directory.
func DefaultCubinCache() CubinCache {
	d, err := os.UserCacheDir()
	if err != nil {
		return CubinCache{}
	}
	return CubinCache{Dir: filepath.Join(d, "kvasir", "cubin")}
}

// cubinKey is sha256 over the source, options, architecture and compiler version.
func cubinKey(src string, opts []string, arch string, major, minor int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00nvrtc %d.%d", src, strings.Join(opts, "\x01"), arch, major, minor)
	return hex.EncodeToString(h.Sum(nil))
}

// CompileCached returns the cubin of src from the cache, compiling and storing it on a miss.
// hit reports whether it came from the cache. A cache that cannot be written only costs the
// next start a compile.
func (n *NVRTC) CompileCached(c CubinCache, name, src, arch string, opts []string) (cubin []byte, hit bool, err error) {
	var path string
	if c.Dir != "" {
		path = filepath.Join(c.Dir, cubinKey(src, opts, arch, n.Major, n.Minor)+".cubin")
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b, true, nil
		}
	}
	cubin, err = n.Compile(name, src, arch, opts)
	if err != nil {
		return nil, false, err
	}
	if path != "" {
		_ = writeFileAtomic(path, cubin)
	}
	return cubin, false, nil
}

// writeFileAtomic writes b to path through a temporary file and a rename.
func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}
