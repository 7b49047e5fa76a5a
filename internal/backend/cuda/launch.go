package cuda

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"unsafe"
)

// Module is a set of loaded CUDA modules (cubins) whose kernels are looked up by name, in
// whichever of them defines it.
type Module struct {
	hs    []uintptr
	funcs map[string]uintptr
}

// LoadModule loads cubin images as one Module (inside Do). On an error the images already
// loaded are unloaded again.
func (dv *Device) LoadModule(cubins ...[]byte) (*Module, error) {
	m := &Module{funcs: map[string]uintptr{}}
	for i, cubin := range cubins {
		if len(cubin) == 0 {
			dv.UnloadModule(m)
			return nil, fmt.Errorf("cuda: load module: image %d is empty", i)
		}
		var h uintptr
		err := dv.drv.check("cuModuleLoadData", dv.drv.cuModuleLoadData(&h, unsafe.Pointer(&cubin[0])))
		runtime.KeepAlive(cubin)
		if err != nil {
			dv.UnloadModule(m)
			return nil, err
		}
		m.hs = append(m.hs, h)
	}
	return m, nil
}

// UnloadModule unloads every image of m (inside Do); the first error is returned.
func (dv *Device) UnloadModule(m *Module) error {
	if m == nil {
		return nil
	}
	var first error
	for _, h := range m.hs {
		if err := dv.drv.check("cuModuleUnload", dv.drv.cuModuleUnload(h)); err != nil && first == nil {
			first = err
		}
	}
	m.hs = nil
	return first
}

// function returns the kernel named name of m, looking it up once (inside Do).
func (dv *Device) function(m *Module, name string) (uintptr, error) {
	if f, ok := m.funcs[name]; ok {
		return f, nil
	}
	cname := cString(name)
	var err error
	for _, h := range m.hs {
		var f uintptr
		if err = dv.drv.check("cuModuleGetFunction", dv.drv.cuModuleGetFunction(&f, h, &cname[0])); err == nil {
			m.funcs[name] = f
			return f, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("no module loaded")
	}
	return 0, fmt.Errorf("kernel %q: %w", name, err)
}

// Dim3 is a CUDA grid or block shape; every extent must be at least 1.
type Dim3 struct{ X, Y, Z int }

// Launch queues kernel name of m on the device's stream (inside Do). args are the kernel's
// parameters in order: Buffer (its device address), uint64, int (passed as a 32-bit int),
// int32, uint32 and float32; they must match the kernel's C types.
func (dv *Device) Launch(m *Module, name string, grid, block Dim3, sharedBytes int, args ...any) error {
	if dv.times != nil {
		return dv.timed(name, func() error { return dv.launch(m, name, grid, block, sharedBytes, args...) })
	}
	return dv.launch(m, name, grid, block, sharedBytes, args...)
}

// launch is Launch without the op profile.
func (dv *Device) launch(m *Module, name string, grid, block Dim3, sharedBytes int, args ...any) error {
	f, err := dv.function(m, name)
	if err != nil {
		return err
	}
	for _, v := range []int{grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z} {
		if v <= 0 || v > math.MaxInt32 {
			return fmt.Errorf("kernel %s: bad launch shape grid %v block %v", name, grid, block)
		}
	}
	slots := make([]uint64, len(args))
	ptrs := make([]unsafe.Pointer, len(args)+1)
	for i, a := range args {
		switch v := a.(type) {
		case Buffer:
			slots[i] = v.Ptr
		case uint64:
			slots[i] = v
		case int:
			if v < math.MinInt32 || v > math.MaxInt32 {
				return fmt.Errorf("kernel %s: argument %d: %d overflows a 32-bit int", name, i, v)
			}
			slots[i] = uint64(uint32(int32(v)))
		case int32:
			slots[i] = uint64(uint32(v))
		case uint32:
			slots[i] = uint64(v)
		case float32:
			slots[i] = uint64(math.Float32bits(v))
		default:
			return fmt.Errorf("kernel %s: argument %d: unsupported type %T", name, i, a)
		}
		ptrs[i] = unsafe.Pointer(&slots[i])
	}
	dv.seq++
	var r int32
	if dv.pdl && pdlKernel(name) {
		attr := &launchAttr{id: launchAttrProgrammaticSerialization}
		attr.val[0] = 1 // programmaticStreamSerializationAllowed
		cfg := &launchConfig{gridX: uint32(grid.X), gridY: uint32(grid.Y), gridZ: uint32(grid.Z),
			blockX: uint32(block.X), blockY: uint32(block.Y), blockZ: uint32(block.Z),
			shared: uint32(sharedBytes), stream: dv.stream, attrs: attr, numAttrs: 1}
		r = dv.drv.cuLaunchKernelEx(cfg, f, unsafe.Pointer(&ptrs[0]), nil)
		runtime.KeepAlive(cfg)
		runtime.KeepAlive(attr)
	} else {
		r = dv.drv.cuLaunchKernel(f, uint32(grid.X), uint32(grid.Y), uint32(grid.Z),
			uint32(block.X), uint32(block.Y), uint32(block.Z), uint32(sharedBytes), dv.stream,
			unsafe.Pointer(&ptrs[0]), nil)
	}
	runtime.KeepAlive(slots)
	runtime.KeepAlive(ptrs)
	if err := dv.drv.check("cuLaunchKernel", r); err != nil {
		return fmt.Errorf("kernel %s grid %v block %v: %w", name, grid, block, err)
	}
	return nil
}

// SetMaxDynamicShared lets kernel name of m use up to n bytes of dynamic shared memory
// (needed above 48 KiB; inside Do).
func (dv *Device) SetMaxDynamicShared(m *Module, name string, n int) error {
	f, err := dv.function(m, name)
	if err != nil {
		return err
	}
	return dv.drv.check("cuFuncSetAttribute", dv.drv.cuFuncSetAttribute(f, funcAttrMaxDynamicSmem, int32(n)))
}

// Timer measures device time on the stream between Start and Stop with CUDA events.
type Timer struct {
	start, stop uintptr
}

// NewTimer creates the timer's two events (inside Do).
func (dv *Device) NewTimer() (*Timer, error) {
	t := &Timer{}
	if err := dv.drv.check("cuEventCreate", dv.drv.cuEventCreate(&t.start, 0)); err != nil {
		return nil, err
	}
	if err := dv.drv.check("cuEventCreate", dv.drv.cuEventCreate(&t.stop, 0)); err != nil {
		dv.drv.cuEventDestroy(t.start)
		return nil, err
	}
	return t, nil
}

// Start records the start event on the stream (inside Do).
func (dv *Device) Start(t *Timer) error {
	return dv.drv.check("cuEventRecord", dv.drv.cuEventRecord(t.start, dv.stream))
}

// Stop records the stop event, waits for it and returns the milliseconds since Start
// (inside Do).
func (dv *Device) Stop(t *Timer) (float64, error) {
	d := dv.drv
	if err := d.check("cuEventRecord", d.cuEventRecord(t.stop, dv.stream)); err != nil {
		return 0, err
	}
	if err := d.check("cuEventSynchronize", d.cuEventSynchronize(t.stop)); err != nil {
		return 0, err
	}
	var ms float32
	if err := d.check("cuEventElapsedTime", d.cuEventElapsedTime(&ms, t.start, t.stop)); err != nil {
		return 0, err
	}
	return float64(ms), nil
}

// FreeTimer destroys the timer's events (inside Do).
func (dv *Device) FreeTimer(t *Timer) {
	dv.drv.cuEventDestroy(t.start)
	dv.drv.cuEventDestroy(t.stop)
}

// Graph is an instantiated CUDA graph captured from the device's stream.
type Graph struct {
	exec uintptr
}

// Capture records the stream work that fn queues into a CUDA graph instead of running it,
// and instantiates it (inside Do). fn must only queue stream work (launches, async copies);
// synchronous copies and synchronization fail during capture.
func (dv *Device) Capture(fn func() error) (*Graph, error) {
	d := dv.drv
	if err := d.check("cuStreamBeginCapture_v2", d.cuStreamBeginCapture(dv.stream, captureModeThreadLocal)); err != nil {
		return nil, err
	}
	if dv.times != nil {
		dv.times.capturing = true
	}
	ferr := fn()
	if dv.times != nil {
		dv.times.capturing = false
	}
	var g uintptr
	eerr := d.check("cuStreamEndCapture", d.cuStreamEndCapture(dv.stream, &g))
	if ferr != nil || eerr != nil {
		if g != 0 {
			d.cuGraphDestroy(g)
		}
		if ferr != nil {
			return nil, fmt.Errorf("cuda graph capture: %w", ferr)
		}
		return nil, eerr
	}
	defer d.cuGraphDestroy(g)
	gr := &Graph{}
	if err := d.check("cuGraphInstantiateWithFlags", d.cuGraphInstantiateWithFlag(&gr.exec, g, 0)); err != nil {
		return nil, err
	}
	return gr, nil
}

// LaunchGraph replays g on the stream (inside Do).
func (dv *Device) LaunchGraph(g *Graph) error {
	dv.seq++
	return dv.timed("graph replay", func() error { return dv.drv.check("cuGraphLaunch", dv.drv.cuGraphLaunch(g.exec, dv.stream)) })
}

// FreeGraph destroys g (inside Do).
func (dv *Device) FreeGraph(g *Graph) error {
	if g == nil || g.exec == 0 {
		return nil
	}
	err := dv.drv.check("cuGraphExecDestroy", dv.drv.cuGraphExecDestroy(g.exec))
	g.exec = 0
	return err
}

// launchConfig mirrors the driver's CUlaunchConfig (cuda.h) on 64-bit platforms.
type launchConfig struct {
	gridX, gridY, gridZ    uint32
	blockX, blockY, blockZ uint32
	shared                 uint32
	_                      uint32
	stream                 uintptr
	attrs                  *launchAttr
	numAttrs               uint32
	_                      uint32
}

// launchAttr mirrors CUlaunchAttribute: a 4-byte id, padding, and a 64-byte value union.
type launchAttr struct {
	id  uint32
	_   uint32
	val [16]uint32
}

// launchAttrProgrammaticSerialization is CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
const launchAttrProgrammaticSerialization = 6

// pdlKernel reports whether kernel name calls pdl_wait before it reads what earlier
// kernels wrote (pdl_entry in kernels/common.cu), so that it may be launched as a
// programmatic dependent of the kernel ahead of it.
func pdlKernel(name string) bool {
	for _, p := range []string{"gemv_n", "gemvm_n", "gemvglu_n", "gemvq_n", "dequant_bf16_", "rmsnorm_", "rope_kv_", "rope_kvq_", "swiglu_", "attn_decode_", "attn_verify", "attn_combine_",
		"embed_", "quantize_x8_rows", "gather_rows_f32", "argmax_part_f32", "argmax_f32", "add_bias_f32", "lora_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
