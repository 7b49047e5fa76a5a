package cuda

import (
	"fmt"
	"unsafe"
)

// Driver holds the CUDA driver API entry points, bound from libcuda.so.1 with purego. It has
// no mutable state after Open; every call that needs a context runs on a Device's goroutine.
type Driver struct {
	lib *library

	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(v *int32) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDeviceGetName           func(name *byte, n int32, dev int32) int32
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuCtxSynchronize          func() int32
	cuMemGetInfo              func(free, total *uint64) int32
	cuMemAlloc                func(p *uint64, size uint64) int32
	cuMemFree                 func(p uint64) int32
	cuMemAllocHost            func(p *unsafe.Pointer, size uint64) int32
	cuMemHostAlloc            func(p *unsafe.Pointer, size uint64, flags uint32) int32
	cuMemFreeHost             func(p unsafe.Pointer) int32
	cuMemcpyHtoD              func(dst uint64, src unsafe.Pointer, n uint64) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, n uint64) int32
	cuMemcpyDtoD              func(dst, src uint64, n uint64) int32
	cuMemcpyHtoDAsync         func(dst uint64, src unsafe.Pointer, n uint64, stream uintptr) int32
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src uint64, n uint64, stream uintptr) int32
	cuMemcpyDtoDAsync         func(dst, src uint64, n uint64, stream uintptr) int32
	cuMemsetD32Async          func(dst uint64, v uint32, n uint64, stream uintptr) int32
	cuStreamCreate            func(s *uintptr, flags uint32) int32
	cuStreamDestroy           func(s uintptr) int32
	cuStreamSynchronize       func(s uintptr) int32
	cuEventCreate             func(e *uintptr, flags uint32) int32
	cuEventDestroy            func(e uintptr) int32
	cuEventRecord             func(e, s uintptr) int32
	cuEventSynchronize        func(e uintptr) int32
	cuStreamWaitEvent         func(s, e uintptr, flags uint32) int32
	cuEventElapsedTime        func(ms *float32, start, end uintptr) int32
	cuModuleLoadData          func(m *uintptr, image unsafe.Pointer) int32
	cuModuleUnload            func(m uintptr) int32
	cuModuleGetFunction       func(f *uintptr, m uintptr, name *byte) int32
	cuFuncSetAttribute        func(f uintptr, attr int32, v int32) int32
	cuLaunchKernel            func(f uintptr, gx, gy, gz, bx, by, bz, shared uint32, stream uintptr, params, extra unsafe.Pointer) int32
	// cuLaunchKernelEx is nil when the driver lacks it (before CUDA 12).
	cuLaunchKernelEx           func(cfg *launchConfig, f uintptr, params, extra unsafe.Pointer) int32
	cuStreamBeginCapture       func(s uintptr, mode int32) int32
	cuStreamEndCapture         func(s uintptr, g *uintptr) int32
	cuGraphInstantiateWithFlag func(exec *uintptr, g uintptr, flags uint64) int32
	cuGraphLaunch              func(exec, s uintptr) int32
	cuGraphDestroy             func(g uintptr) int32
	cuGraphExecDestroy         func(exec uintptr) int32
	cuGetErrorString           func(r int32, s **byte) int32
	cuGetErrorName             func(r int32, s **byte) int32

	// Version is the driver's CUDA version, e.g. 13000 for 13.0.
	Version int
}

// Driver API constants used here (cuda.h).
const (
	attrMultiprocessorCount = 16
	attrComputeMajor        = 75
	attrComputeMinor        = 76
	attrMaxSharedOptin      = 97
	funcAttrMaxDynamicSmem  = 8
	streamNonBlocking       = 1
	eventBlockingSync       = 1
	eventDisableTiming      = 2
	captureModeThreadLocal  = 1
	memHostAllocPortable    = 1
)

// Open loads libcuda.so.1, binds the driver API and initializes it. Without a driver it
// returns an error that says so ("CUDA driver libcuda.so.1 not found: ..."); it never panics.
func Open() (*Driver, error) {
	lib, err := openLibrary("CUDA driver", []string{"libcuda.so.1", "libcuda.so"})
	if err != nil {
		return nil, err
	}
	d := &Driver{lib: lib}
	err = lib.bind([]symbol{
		{&d.cuInit, "cuInit"},
		{&d.cuDriverGetVersion, "cuDriverGetVersion"},
		{&d.cuDeviceGetCount, "cuDeviceGetCount"},
		{&d.cuDeviceGet, "cuDeviceGet"},
		{&d.cuDeviceGetName, "cuDeviceGetName"},
		{&d.cuDeviceGetAttribute, "cuDeviceGetAttribute"},
		{&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&d.cuCtxSetCurrent, "cuCtxSetCurrent"},
		{&d.cuCtxSynchronize, "cuCtxSynchronize"},
		{&d.cuMemGetInfo, "cuMemGetInfo_v2"},
		{&d.cuMemAlloc, "cuMemAlloc_v2"},
		{&d.cuMemFree, "cuMemFree_v2"},
		{&d.cuMemAllocHost, "cuMemAllocHost_v2"},
		{&d.cuMemHostAlloc, "cuMemHostAlloc"},
		{&d.cuMemFreeHost, "cuMemFreeHost"},
		{&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"},
		{&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2"},
		{&d.cuMemcpyDtoD, "cuMemcpyDtoD_v2"},
		{&d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
		{&d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
		{&d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
		{&d.cuMemsetD32Async, "cuMemsetD32Async"},
		{&d.cuStreamCreate, "cuStreamCreate"},
		{&d.cuStreamDestroy, "cuStreamDestroy_v2"},
		{&d.cuStreamSynchronize, "cuStreamSynchronize"},
		{&d.cuEventCreate, "cuEventCreate"},
		{&d.cuEventDestroy, "cuEventDestroy_v2"},
		{&d.cuEventRecord, "cuEventRecord"},
		{&d.cuEventSynchronize, "cuEventSynchronize"},
		{&d.cuStreamWaitEvent, "cuStreamWaitEvent"},
		{&d.cuEventElapsedTime, "cuEventElapsedTime_v2|cuEventElapsedTime"},
		{&d.cuModuleLoadData, "cuModuleLoadData"},
		{&d.cuModuleUnload, "cuModuleUnload"},
		{&d.cuModuleGetFunction, "cuModuleGetFunction"},
		{&d.cuFuncSetAttribute, "cuFuncSetAttribute"},
		{&d.cuLaunchKernel, "cuLaunchKernel"},
		{&d.cuStreamBeginCapture, "cuStreamBeginCapture_v2"},
		{&d.cuStreamEndCapture, "cuStreamEndCapture"},
		{&d.cuGraphInstantiateWithFlag, "cuGraphInstantiateWithFlags"},
		{&d.cuGraphLaunch, "cuGraphLaunch"},
		{&d.cuGraphDestroy, "cuGraphDestroy"},
		{&d.cuGraphExecDestroy, "cuGraphExecDestroy"},
		{&d.cuGetErrorString, "cuGetErrorString"},
		{&d.cuGetErrorName, "cuGetErrorName"},
	})
	if err != nil {
		return nil, fmt.Errorf("CUDA driver %s: %w", lib.name, err)
	}
	// Optional: programmatic dependent launch needs it; plain launches do not.
	if lib.bind([]symbol{{&d.cuLaunchKernelEx, "cuLaunchKernelEx"}}) != nil {
		d.cuLaunchKernelEx = nil
	}
	if err := d.check("cuInit", d.cuInit(0)); err != nil {
		return nil, err
	}
	var v int32
	if err := d.check("cuDriverGetVersion", d.cuDriverGetVersion(&v)); err != nil {
		return nil, err
	}
	d.Version = int(v)
	return d, nil
}

// DeviceCount returns how many CUDA devices the driver sees.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	if err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Devices opens the CUDA driver and counts its devices: what cudabackend.NewBackend does
// first, and what GPU tests ask before they run (they skip when n is too small; err, when
// set, says why there is no driver or count).
func Devices() (drv *Driver, n int, err error) {
	if drv, err = Open(); err != nil {
		return nil, 0, err
	}
	if n, err = drv.DeviceCount(); err != nil {
		return nil, 0, err
	}
	return drv, n, nil
}

// Error is a failed CUDA driver, NVRTC or cuBLAS call.
type Error struct {
	Call string // the C function, e.g. "cuMemAlloc_v2"
	Code int    // its status code
	Name string // the status's name, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Msg  string // the library's description, if any
}

func (e *Error) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, e.Code, e.Msg)
	}
	return fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, e.Code)
}

// check turns a CUresult into nil or an *Error carrying the driver's name and message.
func (d *Driver) check(call string, r int32) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: call, Code: int(r), Name: fmt.Sprintf("CUresult %d", r)}
	var s *byte
	if d.cuGetErrorName != nil && d.cuGetErrorName(r, &s) == 0 && s != nil {
		e.Name = cGoString(s)
	}
	s = nil
	if d.cuGetErrorString != nil && d.cuGetErrorString(r, &s) == 0 && s != nil {
		e.Msg = cGoString(s)
	}
	return e
}

// cGoString copies the NUL-terminated C string at p into Go memory.
func cGoString(p *byte) string {
	if p == nil {
		return ""
	}
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
