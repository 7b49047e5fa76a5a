package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"
)

// Device is one CUDA device, owned by a goroutine locked to its OS thread with the device's
// primary context current. Every CUDA call on the device runs on that goroutine: callers
// hand it closures through Do. Methods documented "inside Do" must only be called from such
// a closure; the other methods go through Do themselves and must not be called from one.
type Device struct {
	drv     *Driver
	ordinal int

	// Set by the device goroutine before Open returns; read-only afterwards.
	dev    int32
	ctx    uintptr
	stream uintptr
	info   DeviceInfo
	// side is the stream of the copies SideDownload queues, which wait for the main
	// stream's work without holding it up.
	side uintptr
	// pdl: kernels that wait for their predecessor in the kernel (pdlKernel) are launched
	// with programmatic stream serialization (compute capability 9.0 and later, unless
	// DeviceOptions.DisablePDL).
	pdl bool
	// times is the op profile kept with DeviceOptions.OpTime (optime.go); nil otherwise.
	times *opTimes
	opt   DeviceOptions
	// seq counts the work queued on the stream (launches, GEMMs, copies, collectives):
	// a value derived from a buffer stays valid while seq has not moved (cudabackend's
	// 16-bit shadows of activations). Touched only by the device goroutine.
	seq uint64

	jobs     chan job
	quit     chan struct{} // closed by Close
	stopOnce sync.Once
	stopped  chan struct{} // closed when the device goroutine has ended
}

// DeviceInfo describes a device.
type DeviceInfo struct {
	Name                 string
	Ordinal              int
	Major, Minor         int // compute capability
	Multiprocessors      int
	MaxSharedMemPerBlock int // opt-in maximum, bytes
	TotalMem, FreeMem    uint64
}

// Arch returns the NVRTC architecture name of the device, e.g. "sm_90".
func (i DeviceInfo) Arch() string { return fmt.Sprintf("sm_%d%d", i.Major, i.Minor) }

// job is one closure for the device goroutine and where its result goes.
type job struct {
	fn  func() error
	res chan error
}

// DeviceOptions configures a Device.
type DeviceOptions struct {
	// OpTime synchronises around every op and keeps their device times, printed to
	// standard error when the device closes (optime.go): a profiler for when nsys is absent.
	OpTime bool
	// DisablePDL turns off programmatic dependent launch of the decode kernels.
	DisablePDL bool
}

// OpenDevice starts the goroutine that owns device ordinal: it retains the primary context,
// makes it current on its locked thread and creates the device's non-blocking stream.
func (d *Driver) OpenDevice(ordinal int, opt DeviceOptions) (*Device, error) {
	dev := &Device{drv: d, ordinal: ordinal, opt: opt, jobs: make(chan job), quit: make(chan struct{}), stopped: make(chan struct{})}
	ready := make(chan error, 1)
	go dev.loop(ready)
	if err := <-ready; err != nil {
		return nil, fmt.Errorf("cuda device %d: %w", ordinal, err)
	}
	return dev, nil
}

// loop is the device goroutine: set up, then run jobs until Close.
func (dv *Device) loop(ready chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	defer close(dv.stopped)
	if err := dv.setup(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for {
		select {
		case j := <-dv.jobs:
			j.res <- dv.run(j.fn)
			continue
		case <-dv.quit:
		}
		break
	}
	d := dv.drv
	d.cuStreamSynchronize(dv.stream)
	d.cuStreamDestroy(dv.stream)
	d.cuStreamSynchronize(dv.side)
	d.cuStreamDestroy(dv.side)
	d.cuDevicePrimaryCtxRelease(dv.dev)
}

// run calls fn, turning a panic into an error so that the device goroutine survives.
func (dv *Device) run(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cuda device %d: panic in device closure: %v", dv.ordinal, r)
		}
	}()
	return fn()
}

func (dv *Device) setup() error {
	d := dv.drv
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&dv.dev, int32(dv.ordinal))); err != nil {
		return err
	}
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&dv.ctx, dv.dev)); err != nil {
		return err
	}
	if err := d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(dv.ctx)); err != nil {
		d.cuDevicePrimaryCtxRelease(dv.dev)
		return err
	}
	if err := d.check("cuStreamCreate", d.cuStreamCreate(&dv.stream, streamNonBlocking)); err != nil {
		d.cuDevicePrimaryCtxRelease(dv.dev)
		return err
	}
	if err := d.check("cuStreamCreate", d.cuStreamCreate(&dv.side, streamNonBlocking)); err != nil {
		d.cuStreamDestroy(dv.stream)
		d.cuDevicePrimaryCtxRelease(dv.dev)
		return err
	}
	attr := func(a int32) int {
		var v int32
		if d.cuDeviceGetAttribute(&v, a, dv.dev) != 0 {
			return 0
		}
		return int(v)
	}
	var name [256]byte
	d.cuDeviceGetName(&name[0], int32(len(name)), dv.dev)
	dv.info = DeviceInfo{Name: goString(name[:]), Ordinal: dv.ordinal,
		Major: attr(attrComputeMajor), Minor: attr(attrComputeMinor),
		Multiprocessors: attr(attrMultiprocessorCount), MaxSharedMemPerBlock: attr(attrMaxSharedOptin)}
	if err := d.check("cuMemGetInfo_v2", d.cuMemGetInfo(&dv.info.FreeMem, &dv.info.TotalMem)); err != nil {
		return err
	}
	dv.pdl = d.cuLaunchKernelEx != nil && dv.info.Major >= 9 && !dv.opt.DisablePDL
	if dv.opt.OpTime {
		dv.times = newOpTimes()
	}
	return nil
}

// errClosed is returned by Do after Close.
var errClosed = errors.New("cuda: device is closed")

// Do runs fn on the device goroutine (its OS thread, with the device's context current) and
// returns fn's error. Calls from several goroutines are serialized. fn must not call Do.
func (dv *Device) Do(fn func() error) error {
	res := make(chan error, 1)
	select {
	case dv.jobs <- job{fn: fn, res: res}:
	case <-dv.stopped:
		return errClosed
	}
	return <-res
}

// Close stops the device goroutine (after the job it is running, if any), synchronizes the
// stream and releases the primary context; later Do calls return an error. Buffers must be
// freed before. Close must not be called from inside Do.
func (dv *Device) Close() error {
	dv.stopOnce.Do(func() { close(dv.quit) })
	<-dv.stopped
	if dv.times != nil {
		dv.times.report(os.Stderr)
	}
	return nil
}

// Info returns what the device reported when it was opened.
func (dv *Device) Info() DeviceInfo { return dv.info }

// Seq returns the count of work queued on the device's stream so far (launches, GEMMs,
// copies, collectives), inside Do: a value derived from a buffer stays valid while Seq
// has not moved.
func (dv *Device) Seq() uint64 { return dv.seq }

// OpTimed reports whether the device keeps an op profile (DeviceOptions.OpTime), which
// times the ops of a step one by one and so wants them run eagerly.
func (dv *Device) OpTimed() bool { return dv.times != nil }

// Driver returns the driver the device was opened from.
func (dv *Device) Driver() *Driver { return dv.drv }

// MemInfo returns the free and total device memory in bytes.
func (dv *Device) MemInfo() (free, total uint64, err error) {
	err = dv.Do(func() error {
		return dv.drv.check("cuMemGetInfo_v2", dv.drv.cuMemGetInfo(&free, &total))
	})
	return free, total, err
}

// Sync waits for all work queued on the device's stream (inside Do).
func (dv *Device) Sync() error {
	return dv.drv.check("cuStreamSynchronize", dv.drv.cuStreamSynchronize(dv.stream))
}

// Synchronize waits for all work queued on the device's stream.
func (dv *Device) Synchronize() error { return dv.Do(dv.Sync) }

// DType is the element type of a device buffer.
type DType int

// Element types: four of fixed size, the GGML block layouts quantized weights keep on the
// device (kernels/gemvq.cu), whose elements come in blocks (Block), and FP8 (one byte).
const (
	F32 DType = iota
	F16
	BF16
	I32
	Q8_0
	Q4_0
	Q4_1
	Q5_0
	Q5_1
	Q4_K
	Q5_K
	Q6_K
	Q2_K
	Q3_K
	// FP8 is one E4M3 byte an element (the bytes of a quant.FP8 weight; its per-row scales
	// are an F32 buffer of their own, kernels/gemvq_fp8.cu).
	FP8
	// U8 is one raw byte an element: the codes of a quantized KV cache (KVCodes).
	U8
	// Q8_0R and Q6_KR are Q8_0 and Q6_K repacked at upload (Repack) so that every 16 bytes
	// of quants a kernel loads start on a 16-byte boundary: GGML's blocks of 34 and 210
	// bytes leave them 2-byte aligned, read two bytes a load. The same bytes a row,
	// rearranged by super-blocks: Q8_0R puts 8 blocks' scales (16 bytes) before their 256
	// quants, Q6_KR puts 8 blocks' low bits, then their high bits, scales and d.
	Q8_0R
	Q6_KR
)

// blockTypes gives each block type its name, weights a block and bytes a block.
var blockTypes = map[DType]struct {
	name          string
	elems, nbytes int
}{
	Q8_0: {"q8_0", 32, 34}, Q4_0: {"q4_0", 32, 18}, Q4_1: {"q4_1", 32, 20}, Q5_0: {"q5_0", 32, 22},
	Q5_1: {"q5_1", 32, 24}, Q4_K: {"q4_k", 256, 144}, Q5_K: {"q5_k", 256, 176}, Q6_K: {"q6_k", 256, 210},
	Q2_K: {"q2_k", 256, 84}, Q3_K: {"q3_k", 256, 110},
	Q8_0R: {"q8_0r", 256, 272}, Q6_KR: {"q6_kr", 2048, 1680},
}

// Block returns the elements and bytes of one block of a block type; ok is false for the
// fixed-size types.
func (t DType) Block() (elems, nbytes int, ok bool) {
	b, ok := blockTypes[t]
	return b.elems, b.nbytes, ok
}

// Size returns the bytes of one element of a fixed-size type (0 for a block type: use
// BytesOf).
func (t DType) Size() int {
	switch t {
	case F16, BF16:
		return 2
	case F32, I32:
		return 4
	case FP8, U8:
		return 1
	}
	return 0
}

// BytesOf returns the bytes of n elements of t (n a whole number of blocks for a block type).
func (t DType) BytesOf(n int) int {
	if e, nb, ok := t.Block(); ok {
		return n / e * nb
	}
	return n * t.Size()
}

func (t DType) String() string {
	switch t {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	case I32:
		return "i32"
	case FP8:
		return "fp8"
	case U8:
		return "u8"
	}
	if b, ok := blockTypes[t]; ok {
		return b.name
	}
	return fmt.Sprintf("dtype(%d)", int(t))
}

// Buffer is a span of device memory holding Len elements of DType. It is a plain value:
// views (Slice) share the allocation, which Free releases once.
type Buffer struct {
	Ptr   uint64 // device address
	DType DType
	Len   int // elements
}

// Bytes returns the buffer's size in bytes.
func (b Buffer) Bytes() int { return b.DType.BytesOf(b.Len) }

// Slice returns the view of elements [start, end) of b; for a block type both ends must
// fall on block boundaries.
func (b Buffer) Slice(start, end int) (Buffer, error) {
	if start < 0 || end < start || end > b.Len {
		return Buffer{}, fmt.Errorf("cuda: slice [%d:%d] of a %d-element buffer", start, end, b.Len)
	}
	if e, _, ok := b.DType.Block(); ok && (start%e != 0 || end%e != 0) {
		return Buffer{}, fmt.Errorf("cuda: slice [%d:%d] of a %s buffer off its %d-element blocks", start, end, b.DType, e)
	}
	return Buffer{Ptr: b.Ptr + uint64(b.DType.BytesOf(start)), DType: b.DType, Len: end - start}, nil
}

// Alloc allocates n elements of dtype t (inside Do).
func (dv *Device) Alloc(t DType, n int) (Buffer, error) {
	if n <= 0 {
		return Buffer{}, fmt.Errorf("cuda: alloc of %d %s elements", n, t)
	}
	if e, _, ok := t.Block(); ok && n%e != 0 {
		return Buffer{}, fmt.Errorf("cuda: alloc of %d %s elements: not whole blocks of %d", n, t, e)
	}
	var p uint64
	if err := dv.drv.check("cuMemAlloc_v2", dv.drv.cuMemAlloc(&p, uint64(t.BytesOf(n)))); err != nil {
		return Buffer{}, fmt.Errorf("alloc %d %s (%d bytes): %w", n, t, t.BytesOf(n), err)
	}
	return Buffer{Ptr: p, DType: t, Len: n}, nil
}

// Free releases b's allocation (inside Do). Freeing a zero Buffer does nothing.
func (dv *Device) Free(b Buffer) error {
	if b.Ptr == 0 {
		return nil
	}
	return dv.drv.check("cuMemFree_v2", dv.drv.cuMemFree(b.Ptr))
}

// hostBytes returns the bytes of a slice of fixed-size elements.
func hostBytes[T any](s []T) (unsafe.Pointer, int) {
	if len(s) == 0 {
		return nil, 0
	}
	var z T
	return unsafe.Pointer(&s[0]), len(s) * int(unsafe.Sizeof(z))
}

// Upload copies host values src into b synchronously (inside Do); src's element size must
// match b's dtype (uint16 for F16/BF16, float32, int32).
func Upload[T any](dv *Device, b Buffer, src []T) error {
	p, n := hostBytes(src)
	if n != b.Bytes() {
		return fmt.Errorf("cuda: upload of %d bytes into a %d-byte %s buffer", n, b.Bytes(), b.DType)
	}
	if n == 0 {
		return nil
	}
	dv.seq++
	err := dv.drv.check("cuMemcpyHtoD_v2", dv.drv.cuMemcpyHtoD(b.Ptr, p, uint64(n)))
	runtime.KeepAlive(src)
	return err
}

// Download copies b into host values dst synchronously (inside Do).
func Download[T any](dv *Device, dst []T, b Buffer) error {
	p, n := hostBytes(dst)
	if n != b.Bytes() {
		return fmt.Errorf("cuda: download of a %d-byte %s buffer into %d bytes", b.Bytes(), b.DType, n)
	}
	if n == 0 {
		return nil
	}
	// The stream is non-blocking, so wait for it before a synchronous copy.
	if err := dv.Sync(); err != nil {
		return err
	}
	err := dv.drv.check("cuMemcpyDtoH_v2", dv.drv.cuMemcpyDtoH(p, b.Ptr, uint64(n)))
	runtime.KeepAlive(dst)
	return err
}

// Fill32 sets every 32-bit word of b to the bit pattern v, asynchronously on the stream
// (inside Do). b's size must be a multiple of 4 bytes.
func (dv *Device) Fill32(b Buffer, v uint32) error {
	if b.Bytes()%4 != 0 {
		return fmt.Errorf("cuda: fill32 of a %d-byte buffer", b.Bytes())
	}
	dv.seq++
	return dv.drv.check("cuMemsetD32Async", dv.drv.cuMemsetD32Async(b.Ptr, v, uint64(b.Bytes()/4), dv.stream))
}

// CopyAsync copies src into dst on the stream (inside Do); sizes must match.
func (dv *Device) CopyAsync(dst, src Buffer) error {
	if dst.Bytes() != src.Bytes() {
		return fmt.Errorf("cuda: copy of %d bytes into %d", src.Bytes(), dst.Bytes())
	}
	dv.seq++
	return dv.drv.check("cuMemcpyDtoDAsync_v2", dv.drv.cuMemcpyDtoDAsync(dst.Ptr, src.Ptr, uint64(src.Bytes()), dv.stream))
}

// HostBuffer is page-locked host memory, which async copies need.
type HostBuffer struct {
	ptr unsafe.Pointer
	n   int
}

// AllocHost allocates n bytes of pinned host memory (inside Do).
func (dv *Device) AllocHost(n int) (*HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: pinned alloc of %d bytes", n)
	}
	var p unsafe.Pointer
	if err := dv.drv.check("cuMemHostAlloc", dv.drv.cuMemHostAlloc(&p, uint64(n), memHostAllocPortable)); err != nil {
		return nil, err
	}
	return &HostBuffer{ptr: p, n: n}, nil
}

// Bytes returns the pinned memory as a byte slice; it is valid until FreeHost.
func (h *HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(h.ptr), h.n) }

// Float32s returns the pinned memory as float32 values.
func (h *HostBuffer) Float32s() []float32 { return unsafe.Slice((*float32)(h.ptr), h.n/4) }

// Int32s returns the pinned memory as int32 values.
func (h *HostBuffer) Int32s() []int32 { return unsafe.Slice((*int32)(h.ptr), h.n/4) }

// FreeHost releases pinned memory (inside Do).
func (dv *Device) FreeHost(h *HostBuffer) error {
	if h == nil || h.ptr == nil {
		return nil
	}
	err := dv.drv.check("cuMemFreeHost", dv.drv.cuMemFreeHost(h.ptr))
	h.ptr, h.n = nil, 0
	return err
}

// UploadAsync queues a copy of the first b.Bytes() bytes of h at offset off into b (inside Do).
func (dv *Device) UploadAsync(b Buffer, h *HostBuffer, off int) error {
	if off < 0 || off+b.Bytes() > h.n {
		return fmt.Errorf("cuda: async upload of %d bytes at %d from a %d-byte host buffer", b.Bytes(), off, h.n)
	}
	dv.seq++
	return dv.drv.check("cuMemcpyHtoDAsync_v2", dv.drv.cuMemcpyHtoDAsync(b.Ptr, unsafe.Add(h.ptr, off), uint64(b.Bytes()), dv.stream))
}

// DownloadAsync queues a copy of b into h at offset off (inside Do); Sync before reading h.
func (dv *Device) DownloadAsync(h *HostBuffer, off int, b Buffer) error {
	if off < 0 || off+b.Bytes() > h.n {
		return fmt.Errorf("cuda: async download of %d bytes at %d into a %d-byte host buffer", b.Bytes(), off, h.n)
	}
	return dv.drv.check("cuMemcpyDtoHAsync_v2", dv.drv.cuMemcpyDtoHAsync(unsafe.Add(h.ptr, off), b.Ptr, uint64(b.Bytes()), dv.stream))
}

// Event marks a point of a stream's work (SideDownload's copies done).
type Event struct{ e uintptr }

// SideDownload queues copies of bufs into h at offsets offs on the device's side stream,
// after the work queued on its main stream so far, and returns an event recorded after
// them (inside Do). The main stream goes on with the work queued after, not waiting for
// the copies; WaitEvent, from any goroutine, waits for them. h must stay allocated until
// then.
func (dv *Device) SideDownload(h *HostBuffer, offs []int, bufs []Buffer) (Event, error) {
	if len(offs) != len(bufs) {
		return Event{}, fmt.Errorf("cuda: side download of %d buffers at %d offsets", len(bufs), len(offs))
	}
	for i, b := range bufs {
		if offs[i] < 0 || offs[i]+b.Bytes() > h.n {
			return Event{}, fmt.Errorf("cuda: side download of %d bytes at %d into a %d-byte host buffer", b.Bytes(), offs[i], h.n)
		}
	}
	d := dv.drv
	var after, done uintptr
	if err := d.check("cuEventCreate", d.cuEventCreate(&after, eventDisableTiming)); err != nil {
		return Event{}, err
	}
	// Destroying an event recorded but not reached yet is allowed: the driver releases it
	// once reached, and the side stream's wait holds on to what it waits for.
	defer d.cuEventDestroy(after)
	if err := d.check("cuEventRecord", d.cuEventRecord(after, dv.stream)); err != nil {
		return Event{}, err
	}
	if err := d.check("cuStreamWaitEvent", d.cuStreamWaitEvent(dv.side, after, 0)); err != nil {
		return Event{}, err
	}
	for i, b := range bufs {
		if err := d.check("cuMemcpyDtoHAsync_v2", d.cuMemcpyDtoHAsync(unsafe.Add(h.ptr, offs[i]), b.Ptr, uint64(b.Bytes()), dv.side)); err != nil {
			return Event{}, err
		}
	}
	// WaitEvent's thread sleeps until the copies are done rather than spinning a core.
	if err := d.check("cuEventCreate", d.cuEventCreate(&done, eventDisableTiming|eventBlockingSync)); err != nil {
		return Event{}, err
	}
	if err := d.check("cuEventRecord", d.cuEventRecord(done, dv.side)); err != nil {
		d.cuEventDestroy(done)
		return Event{}, err
	}
	return Event{e: done}, nil
}

// WaitEvent waits until e is reached and releases it. It runs on the calling goroutine,
// not the device's (whose thread may be busy queuing or waiting for a step), with the
// device's context made current on its thread for the call.
func (dv *Device) WaitEvent(e Event) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := dv.drv
	if err := d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(dv.ctx)); err != nil {
		return err
	}
	err := d.check("cuEventSynchronize", d.cuEventSynchronize(e.e))
	return errors.Join(err, d.check("cuEventDestroy_v2", d.cuEventDestroy(e.e)))
}
