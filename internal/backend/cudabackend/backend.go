package cudabackend

import (
	"fmt"
	"io"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// BackendOptions configures a Backend.
type BackendOptions struct {
	// Ordinal is the CUDA device to run on.
	Ordinal int
	// Cache is where compiled kernels are kept; the zero value uses cuda.DefaultCubinCache.
	Cache *cuda.CubinCache
	// OpTime keeps a profile of every op's device time, printed to standard error when
	// the backend closes (see cuda.DeviceOptions.OpTime).
	OpTime bool
	// DisablePDL launches the decode kernels without programmatic dependent launch (see
	// cuda.DeviceOptions.DisablePDL).
	DisablePDL bool
	// DisableShadows makes the cuBLAS steps cast their activations to 16 bits, and the
	// int8 quantized GEMVs round theirs to 8, with a kernel of their own instead of reading
	// the copy the producing op (RMSNorm, SwiGLU) wrote beside its output.
	DisableShadows bool
	// WidenQuantized uploads quantized matrices dequantized to BF16 instead of in their
	// GGML block layouts (the behaviour before the quantized kernels; for comparisons).
	WidenQuantized bool
	// RepackQuantized uploads Q8_0 and Q6_K matrices repacked for aligned loads where
	// their rows allow it (cuda.Repacked) instead of in GGML's blocks.
	RepackQuantized bool
	// QuantGEMV is the kernel layout of decode's quantized GEMV (cuda.GEMVLayout);
	// unset, DefaultQuantGEMV. Its int8 layouts round the activations to 8 bits.
	QuantGEMV *cuda.GEMVLayout
	// Sparse2of4 says when 2:4 sparse BF16 or F16 linear-layer weights (kvasir prune
	// --pattern 2:4) are compressed at upload and multiplied through cuSPARSELt
	// (libcusparseLt.so.0): SparseAuto (the zero value) when the library loads, SparseOn
	// requiring it, SparseOff never.
	Sparse2of4 SparseMode
	// Log receives the backend's notes: the cuSPARSELt library opened, 2:4 weights left
	// dense and why (nil: none).
	Log io.Writer
}

// DefaultQuantGEMV is the quantized GEMV layout decode uses unless told otherwise:
// split8, the activations rounded to 8 bits once a launch for the int8 dot products, as
// llama.cpp's Q8_1 (on the H200, 8B decode 1.20x split's with Q4_K and 1.17x with Q8_0,
// llama-3.2-1b 1.14-1.16x: docs/BENCHMARKS.md); split keeps float32 activations.
const DefaultQuantGEMV = cuda.GEMVSplitX8

// maxX8Cols bounds the columns of a quantized weight the int8 GEMV layout reads (its
// scratch for the rounded x is reserved when the backend opens, GEMVMaxRows rows of it).
const maxX8Cols = 65536

// Backend implements backend.Backend on one NVIDIA GPU. Every op is queued on the device's
// stream from the device goroutine (Run is cuda.Device.Do); Logits is the step's only host
// synchronisation.
//
// Memory: weights in BF16, F16 or F32 are uploaded as they are; quantized weights are
// dequantized to BF16 at upload; 1-D weights become F32; 2:4 sparse BF16/F16 linear-layer
// weights are compressed for cuSPARSELt (BackendOptions.Sparse2of4, sparse.go) without a
// dense copy. Activations are F32. MatMul over
// a 16-bit weight runs a GEMV kernel (F32 activations, several weight rows per block) for up to 8 rows and
// otherwise casts the activations to the weight's type for a cuBLAS GEMM with float32
// accumulation. A KV cache holds the element type its KVSpec asks for (F32, F16, BF16, or
// the codes and scales of a quantized type, the CPU backend's bytes).
type Backend struct {
	dev  *cuda.Device
	ops  *cuda.Ops
	nv   *cuda.NVRTC
	blas *cuda.CuBLAS

	allocs map[uint64]cuda.Buffer // every allocation the backend made, freed by Close

	// The current step: its metadata in pinned host memory and on the device.
	cur      *step
	metaHost *cuda.HostBuffer
	metaDev  cuda.Buffer
	scratch  cuda.Buffer // 16-bit activations cast for cuBLAS
	// shadows: producing ops write 16-bit copies of their outputs into scratch
	// (shadow.go); shadow says which values it holds; castType is the 16-bit
	// type the last cast was to (the type of the shadows RMSNorm writes).
	shadows    bool
	shadow     activationShadow
	castType   cuda.DType
	gluScratch cuda.Buffer     // F32 up products of MatMulSwiGLU's cuBLAS path
	widen      bool            // quantized matrices are uploaded as BF16 (BackendOptions.WidenQuantized)
	repack     bool            // Q8_0 and Q6_K are repacked (BackendOptions.RepackQuantized)
	quantGEMV  cuda.GEMVLayout // decode's quantized GEMV (BackendOptions.QuantGEMV)
	blockTyped bool            // a weight went up in a GGML block type (x8Target)
	dequant    cuda.Buffer     // BF16 rows of a quantized weight dequantized for cuBLAS (matMulDequantized)
	logitsDev  cuda.Buffer     // F32 logits of the step
	argmaxWork cuda.Buffer     // F32 partial maxima of cuda.Ops.Argmax
	work       *cuda.DecodeWorkspace
	idsDev     cuda.Buffer      // I32 token ids picked on the device (LogitsArgmax)
	sampleDev  cuda.Buffer      // per-row sampling settings (LogitsSample)
	maskHost   *cuda.HostBuffer // a step's vocabulary masks in pinned memory (uploadMasks)
	maskDev    cuda.Buffer      // the same on the device
	blockHost  *cuda.HostBuffer // pinned staging of ReadBlocks and WriteBlocks
	tables     []int32          // block tables re-laid with a graph step's stride
	// layerHost is the pinned staging of a step's ReadLayerBlocks, layerAt where the
	// step's next read goes in it.
	layerHost *cuda.HostBuffer
	layerAt   int

	// encScratch holds an encoder step's position and segment embedding rows, encPooled
	// its pooled rows before they are read back (EncoderOps).
	encScratch, encPooled cuda.Buffer
	// massBuf accumulates one sequence's attention mass (AttentionMass).
	massBuf cuda.Buffer

	// Captured decode graphs by owner, bucket and block-table stride; dropped whenever a
	// buffer is freed (a graph holds device addresses).
	graphs    map[graphKey]*graphEntry
	capturing bool // ops are being captured into a graph
	warned    bool // a capture failure was reported

	// NCCL groups the backend is a rank of (NewGroup); a graph is not replayed once one
	// of them is aborted.
	groups []*commGroup

	moe moeState // the mixture-of-experts scratch and expert tables (moe.go)

	sparse sparseState // cuSPARSELt and the 2:4 weights compressed for it (sparse.go)
}

// decodeSplits is the most split-K partitions decode attention uses per sequence and head.
const decodeSplits = 32

// NewBackend opens the CUDA driver, the device, NVRTC and cuBLAS, and compiles (or loads
// from cache) the kernels; cuSPARSELt is opened at the first 2:4 weight uploaded. Without a
// driver or a device it returns an error saying so.
func NewBackend(opt BackendOptions) (*Backend, error) {
	if opt.Sparse2of4 < SparseAuto || opt.Sparse2of4 > SparseOff {
		return nil, fmt.Errorf("cuda: 2:4 sparse mode %s: want auto, on or off", opt.Sparse2of4)
	}
	drv, n, err := cuda.Devices()
	if err != nil {
		return nil, err
	}
	if opt.Ordinal < 0 || opt.Ordinal >= n {
		return nil, fmt.Errorf("cuda: device %d requested, %d present", opt.Ordinal, n)
	}
	nv, err := cuda.OpenNVRTC()
	if err != nil {
		return nil, err
	}
	blasLib, err := cuda.OpenCuBLAS()
	if err != nil {
		return nil, err
	}
	dev, err := drv.OpenDevice(opt.Ordinal, cuda.DeviceOptions{OpTime: opt.OpTime, DisablePDL: opt.DisablePDL})
	if err != nil {
		return nil, err
	}
	cache := cuda.DefaultCubinCache()
	if opt.Cache != nil {
		cache = *opt.Cache
	}
	b := &Backend{dev: dev, nv: nv, blas: blasLib, allocs: map[uint64]cuda.Buffer{}, graphs: map[graphKey]*graphEntry{},
		shadows: !opt.DisableShadows, castType: cuda.BF16, widen: opt.WidenQuantized, repack: opt.RepackQuantized, quantGEMV: DefaultQuantGEMV,
		sparse: sparseState{mode: opt.Sparse2of4, log: opt.Log}}
	if b.sparse.log == nil {
		b.sparse.log = io.Discard
	}
	if opt.QuantGEMV != nil {
		b.quantGEMV = *opt.QuantGEMV
	}
	err = dev.Do(func() error {
		k, err := dev.LoadKernels(nv, cache)
		if err != nil {
			return err
		}
		bl, err := dev.NewBLAS(blasLib)
		if err != nil {
			dev.FreeKernels(k)
			return err
		}
		b.ops = &cuda.Ops{Dev: dev, Kern: k, BLAS: bl}
		if b.quantGEMV.Int8() {
			if err := b.ops.AllocX8(cuda.GEMVMaxRows * maxX8Cols); err != nil {
				dev.FreeBLAS(bl)
				dev.FreeKernels(k)
				return err
			}
		}
		return nil
	})
	if err != nil {
		dev.Close()
		return nil, err
	}
	return b, nil
}

// Device returns the device the backend runs on.
func (b *Backend) Device() *cuda.Device { return b.dev }

// Name describes the backend and its device.
func (b *Backend) Name() string {
	i := b.dev.Info()
	return fmt.Sprintf("cuda (%s, %s, %d SMs, %.0f GiB, cuBLAS %d)", i.Name, i.Arch(), i.Multiprocessors,
		float64(i.TotalMem)/(1<<30), b.ops.BLAS.Version)
}

// Run runs fn on the device goroutine.
func (b *Backend) Run(fn func() error) error { return b.dev.Do(fn) }

// MemoryInfo returns the device's free and total memory in bytes (backend.MemoryReporter).
func (b *Backend) MemoryInfo() (free, total int64, err error) {
	f, t, err := b.dev.MemInfo()
	return int64(f), int64(t), err
}

// AllocatedBytes returns the bytes of the buffers the backend holds.
func (b *Backend) AllocatedBytes() int64 {
	var n int64
	_ = b.dev.Do(func() error {
		for _, buf := range b.allocs {
			n += int64(buf.Bytes())
		}
		n += b.sparseBytes()
		return nil
	})
	return n
}

// Close frees every buffer, the kernels and the cuBLAS handle, and stops the device.
func (b *Backend) Close() error {
	err := b.dev.Do(func() error {
		errs := []error{b.dev.Sync(), b.dropGraphs(), b.closeSparse()}
		for _, buf := range b.allocs {
			errs = append(errs, b.dev.Free(buf))
		}
		b.allocs = map[uint64]cuda.Buffer{}
		if b.work != nil {
			errs = append(errs, b.dev.FreeDecodeWorkspace(b.work))
			b.work = nil
		}
		errs = append(errs, b.dev.FreeHost(b.metaHost), b.dev.FreeHost(b.maskHost), b.dev.FreeHost(b.blockHost), b.dev.FreeHost(b.layerHost),
			b.ops.FreeX8(), b.dev.FreeBLAS(b.ops.BLAS), b.dev.FreeKernels(b.ops.Kern))
		b.metaHost, b.maskHost, b.blockHost, b.layerHost = nil, nil, nil, nil
		return firstErr(errs...)
	})
	if cerr := b.dev.Close(); err == nil {
		err = cerr
	}
	return err
}

// alloc allocates n elements of t and remembers the buffer for Close (inside Run).
func (b *Backend) alloc(t cuda.DType, n int) (cuda.Buffer, error) {
	buf, err := b.dev.Alloc(t, n)
	if err != nil {
		return cuda.Buffer{}, err
	}
	b.allocs[buf.Ptr] = buf
	return buf, nil
}

// grow makes *buf hold at least n values of dt (inside Run): when it holds fewer, the stream
// is synchronized (nothing queued may still use the old buffer; during a graph capture this
// fails, before anything is freed), the old buffer freed and one of size values (size >= n),
// or twice the old size if that is more, allocated: freeing drops every captured graph, so
// a buffer that keeps growing by a little must not drop them each time. what names the
// buffer in errors.
func (b *Backend) grow(buf *cuda.Buffer, dt cuda.DType, n, size int, what string) error {
	if buf.Len >= n {
		return nil
	}
	size = max(size, 2*buf.Len)
	if err := b.dev.Sync(); err != nil {
		return err
	}
	if err := b.free(*buf); err != nil {
		return err
	}
	*buf = cuda.Buffer{}
	nb, err := b.alloc(dt, size)
	if err != nil {
		return fmt.Errorf("cuda %s: %w", what, err)
	}
	*buf = nb
	return nil
}

// free releases a buffer made by alloc (inside Run).
func (b *Backend) free(buf cuda.Buffer) error {
	if buf.Ptr == 0 {
		return nil
	}
	if _, ok := b.allocs[buf.Ptr]; !ok {
		return fmt.Errorf("cuda: free of a buffer the backend did not allocate")
	}
	delete(b.allocs, buf.Ptr)
	return firstErr(b.dropGraphs(), b.dev.Free(buf))
}

// deviceType maps a quant type to the device dtype that holds it as is.
func deviceType(t quant.Type) (cuda.DType, bool) {
	switch t {
	case quant.F32:
		return cuda.F32, true
	case quant.F16:
		return cuda.F16, true
	case quant.BF16:
		return cuda.BF16, true
	case quant.I32:
		return cuda.I32, true
	}
	return 0, false
}

// blockTypes maps the GGML block types the GPU kernels read to their device types.
var blockTypes = map[quant.Type]cuda.DType{
	quant.Q8_0: cuda.Q8_0, quant.Q4_0: cuda.Q4_0, quant.Q4_1: cuda.Q4_1, quant.Q5_0: cuda.Q5_0,
	quant.Q5_1: cuda.Q5_1, quant.Q4_K: cuda.Q4_K, quant.Q5_K: cuda.Q5_K, quant.Q6_K: cuda.Q6_K,
	quant.Q2_K: cuda.Q2_K, quant.Q3_K: cuda.Q3_K,
}

// weightTypes are the device types a weight matrix may have.
var weightTypes = []cuda.DType{cuda.F32, cuda.F16, cuda.BF16, cuda.FP8,
	cuda.Q8_0, cuda.Q4_0, cuda.Q4_1, cuda.Q5_0, cuda.Q5_1, cuda.Q4_K, cuda.Q5_K, cuda.Q6_K, cuda.Q2_K, cuda.Q3_K,
	cuda.Q8_0R, cuda.Q6_KR}

// sixteenBit reports whether dt is one of the 16-bit float types.
func sixteenBit(dt cuda.DType) bool { return dt == cuda.F16 || dt == cuda.BF16 }

// dequantScratch is the most BF16 values matMulDequantized dequantizes at once (64 MiB):
// enough rows of any weight for cuBLAS to run at full speed, without a widened copy of
// the largest (an 8B model's output matrix is half a billion values).
const dequantScratch = 32 << 20

// UploadWeight copies a weight to the device: matrices of F32, F16, BF16 and of the block
// types in blockTypes as they are (the quantized kernels read GGML's layouts), other
// quantized matrices (and all of them with WidenQuantized) dequantized to BF16 row by row,
// 1-D tensors decoded to F32.
func (b *Backend) UploadWeight(t *format.Tensor) (backend.Tensor, error) {
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("cuda upload: %w", err)
	}
	if !quant.Supported(t.Type) {
		return nil, fmt.Errorf("cuda upload: tensor %q: type %s is not supported", t.Name, t.Type)
	}
	if len(t.Shape) == 1 {
		v := make([]float32, t.Shape[0])
		if err := quant.Dequantize(t.Type, t.Data, v); err != nil {
			return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
		}
		buf, err := b.alloc(cuda.F32, len(v))
		if err != nil {
			return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
		}
		if err := cuda.Upload(b.dev, buf, v); err != nil {
			return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
		}
		return &tensor{buf: buf, shape: []int{len(v)}}, nil
	}
	rows, cols := t.Rows()
	if t.Type == quant.FP8 {
		return b.uploadFP8(t, rows, cols)
	}
	dt, direct := deviceType(t.Type)
	data := t.Data
	if q, ok := blockTypes[t.Type]; ok && !b.widen {
		dt, direct, b.blockTyped = q, true, true
		if b.repack {
			dt = cuda.Repacked(q, cols)
			var err error
			if data, err = cuda.Repack(dt, q, t.Data[:q.BytesOf(rows*cols)], rows, cols); err != nil {
				return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
			}
		}
		// The scratch for larger batches is reserved now: growing it inside a graph
		// capture would fail.
		n := min(rows, max(1, dequantScratch/cols)) * cols
		if err := b.grow(&b.dequant, cuda.BF16, n, n, "dequantization scratch"); err != nil {
			return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
		}
	}
	if !direct || dt == cuda.I32 {
		dt = cuda.BF16
	}
	if direct {
		if sp, err := b.uploadSparse(t, dt, rows, cols); err != nil || sp != nil {
			if err != nil {
				return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
			}
			return sp, nil
		}
	}
	buf, err := b.alloc(dt, rows*cols)
	if err != nil {
		return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
	}
	if direct {
		err = cuda.Upload(b.dev, buf, data[:buf.Bytes()])
	} else {
		err = b.uploadDequantized(buf, t, rows, cols)
	}
	if err != nil {
		return nil, fmt.Errorf("cuda upload: tensor %q: %w", t.Name, err)
	}
	return &tensor{buf: buf, shape: []int{rows, cols}}, nil
}

// uploadDequantized dequantizes a block-format matrix to BF16, a chunk of rows at a time,
// into buf (inside Run).
func (b *Backend) uploadDequantized(buf cuda.Buffer, t *format.Tensor, rows, cols int) error {
	rb, err := t.Type.RowBytes(cols)
	if err != nil {
		return err
	}
	chunk := max(1, (8<<20)/(2*cols)) // rows per copy: about 8 MiB of BF16
	row := make([]float32, cols)
	half := make([]uint16, min(chunk, rows)*cols)
	for r0 := 0; r0 < rows; r0 += chunk {
		r1 := min(rows, r0+chunk)
		for r := r0; r < r1; r++ {
			if err := quant.Dequantize(t.Type, t.Data[r*rb:(r+1)*rb], row); err != nil {
				return fmt.Errorf("row %d: %w", r, err)
			}
			dst := half[(r-r0)*cols : (r-r0+1)*cols]
			for i, v := range row {
				dst[i] = quant.F32ToBF16(v)
			}
		}
		part, err := buf.Slice(r0*cols, r1*cols)
		if err != nil {
			return err
		}
		if err := cuda.Upload(b.dev, part, half[:(r1-r0)*cols]); err != nil {
			return err
		}
	}
	return nil
}

// NewTensor allocates a zeroed F32 or I32 tensor of one or two dimensions.
func (b *Backend) NewTensor(dtype quant.Type, shape ...int) (backend.Tensor, error) {
	if len(shape) < 1 || len(shape) > 2 {
		return nil, fmt.Errorf("cuda: new tensor of shape %v: want 1 or 2 dimensions", shape)
	}
	n := 1
	for _, d := range shape {
		if d <= 0 {
			return nil, fmt.Errorf("cuda: new tensor of shape %v", shape)
		}
		n *= d
	}
	dt, ok := deviceType(dtype)
	if !ok || (dt != cuda.F32 && dt != cuda.I32) {
		return nil, fmt.Errorf("cuda: new tensor of %s: want f32 or i32", dtype)
	}
	buf, err := b.alloc(dt, n)
	if err != nil {
		return nil, err
	}
	if err := b.dev.Fill32(buf, 0); err != nil {
		return nil, err
	}
	return &tensor{buf: buf, shape: append([]int(nil), shape...)}, nil
}

// Free releases a tensor made by UploadWeight or NewTensor, after the work queued so far.
func (b *Backend) Free(t backend.Tensor) error {
	c, ok := t.(*tensor)
	if !ok || c == nil {
		return fmt.Errorf("cuda free: not a CUDA tensor")
	}
	if c.view {
		return fmt.Errorf("cuda free: a view (Rows) is not freed on its own")
	}
	if err := b.dev.Sync(); err != nil {
		return err
	}
	if c.sparse != nil {
		err := b.freeSparse(c.sparse)
		c.sparse, c.buf = nil, cuda.Buffer{}
		return err
	}
	err := firstErr(b.forgetExperts(c), b.free(c.buf))
	if c.scale.Len > 0 {
		err = firstErr(err, b.free(c.scale))
	}
	c.buf, c.scale = cuda.Buffer{}, cuda.Buffer{}
	return err
}

// NewKVCache allocates a zeroed cache of the spec's element type: F32, F16, BF16, or a
// quantized type (quant.KVInt8, KVFP8E4M3, KVFP8E5M2: codes and scales, kvquant.go). A
// cache whose values are its keys (spec.ValuesAreKeys) holds each vector once.
func (b *Backend) NewKVCache(spec backend.KVSpec) (backend.KVCache, error) {
	if spec.Layers <= 0 || spec.NumBlocks <= 0 || spec.BlockSize <= 0 || spec.KVHeads <= 0 || spec.HeadDim <= 0 {
		return nil, fmt.Errorf("cuda kv cache: bad geometry %+v", spec)
	}
	if codes, ok := kvCodes(spec.DType); ok {
		return b.newQuantizedKVCache(spec, codes)
	}
	kv, ok := deviceType(spec.DType)
	if !ok || kv == cuda.I32 {
		return nil, fmt.Errorf("cuda kv cache: elements of %s: want f32, f16, bf16, int8, fp8_e4m3 or fp8_e5m2", spec.DType)
	}
	c := &kvCache{spec: spec}
	n := spec.NumBlocks * spec.BlockSize * spec.KVHeads * spec.HeadDim
	for l := range spec.Layers {
		layer := &cuda.KVCacheLayer{NumBlocks: spec.NumBlocks, BlockSize: spec.BlockSize, KVHeads: spec.KVHeads, HeadDim: spec.HeadDim,
			ValuesAreKeys: spec.ValuesAreKeys}
		var err error
		if layer.K, err = b.alloc(kv, n); err != nil {
			return nil, fmt.Errorf("cuda kv cache: layer %d: %w", l, err)
		}
		layer.V = layer.K // the values are the keys: one allocation
		if !spec.ValuesAreKeys {
			if layer.V, err = b.alloc(kv, n); err != nil {
				return nil, fmt.Errorf("cuda kv cache: layer %d: %w", l, err)
			}
		}
		if err := firstErr(layer.Check("kv cache"), b.dev.Fill32(layer.K, 0), b.dev.Fill32(layer.V, 0)); err != nil {
			return nil, err
		}
		c.layers = append(c.layers, layer)
	}
	return c, nil
}

// UploadStep copies the step's index arrays into pinned memory and from there, in one
// asynchronous copy, to the device.
func (b *Backend) UploadStep(meta *backend.StepMeta) (backend.Step, error) {
	n, seqs := meta.NumTokens(), meta.NumSeqs()
	switch {
	case n == 0 || seqs <= 0:
		return nil, fmt.Errorf("cuda step: %d tokens in %d sequences", n, seqs)
	case len(meta.Positions) != n || len(meta.SlotMapping) != n:
		return nil, fmt.Errorf("cuda step: %d tokens, %d positions, %d slots", n, len(meta.Positions), len(meta.SlotMapping))
	case meta.MaxBlocks <= 0 || len(meta.ContextLens) != seqs || len(meta.BlockTables) != seqs*meta.MaxBlocks:
		return nil, fmt.Errorf("cuda step: %d sequences, %d context lengths, %d block table entries of %d per sequence",
			seqs, len(meta.ContextLens), len(meta.BlockTables), meta.MaxBlocks)
	case meta.QueryStarts[0] != 0 || int(meta.QueryStarts[seqs]) != n:
		return nil, fmt.Errorf("cuda step: sequences cover tokens [%d, %d) of %d", meta.QueryStarts[0], meta.QueryStarts[seqs], n)
	}
	for i := range seqs {
		q := meta.QueryStarts[i+1] - meta.QueryStarts[i]
		if q <= 0 {
			return nil, fmt.Errorf("cuda step: sequence %d has no tokens", i)
		}
		if meta.ContextLens[i] < q {
			return nil, fmt.Errorf("cuda step: sequence %d: %d tokens in a context of %d", i, q, meta.ContextLens[i])
		}
	}
	// A step of a graph shape is laid out for graph replay: its block tables get a stride
	// rounded up to a power of two, so that steps of one shape share kernel arguments (and
	// a graph) while their contexts grow.
	query, graphable := graphQuery(meta)
	stride, tables := meta.MaxBlocks, meta.BlockTables
	if graphable {
		stride = blockStrideBound(meta.MaxBlocks)
		tables = b.paddedTables(meta, stride)
	}
	if meta.LoRASlots != nil && len(meta.LoRASlots) != n {
		return nil, fmt.Errorf("cuda step: %d adapter slots for %d tokens", len(meta.LoRASlots), n)
	}
	// The adapters' tokens grouped by slot for the LoRA kernel (cuda.LoRAPlan).
	var loraOrder, loraTiles []int32
	if meta.LoRASlots != nil {
		nSlots := len(meta.LoRARanks)
		for t, s := range meta.LoRASlots {
			if s < -1 || int(s) >= nSlots {
				return nil, fmt.Errorf("cuda step: token %d: adapter slot %d outside %d", t, s, nSlots)
			}
		}
		loraOrder, loraTiles = make([]int32, n), make([]int32, cuda.LoRATiles(n, nSlots))
		cuda.LoRAPlan(meta.LoRASlots, nSlots, loraOrder, loraTiles)
	}
	parts := [][]int32{meta.Tokens, meta.Positions, meta.SlotMapping, meta.QueryStarts, meta.ContextLens,
		tables, meta.LogitsIndices, meta.TokenTypes, meta.LoRASlots, meta.LoRARanks, loraOrder, loraTiles}
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	// The previous step's copy out of the pinned buffer must be done before it is rewritten.
	if err := b.dev.Sync(); err != nil {
		return nil, err
	}
	if b.metaHost == nil || len(b.metaHost.Int32s()) < total {
		if err := b.dev.FreeHost(b.metaHost); err != nil {
			return nil, err
		}
		b.metaHost = nil
		if err := b.free(b.metaDev); err != nil {
			return nil, err
		}
		b.metaDev = cuda.Buffer{}
		size := max(total*2, 4096)
		h, err := b.dev.AllocHost(4 * size)
		if err != nil {
			return nil, fmt.Errorf("cuda step: %w", err)
		}
		b.metaHost = h
		if b.metaDev, err = b.alloc(cuda.I32, size); err != nil {
			return nil, fmt.Errorf("cuda step: %w", err)
		}
	}
	host := b.metaHost.Int32s()
	views := make([]cuda.Buffer, len(parts))
	off := 0
	for i, p := range parts {
		copy(host[off:], p)
		views[i] = cuda.Buffer{Ptr: b.metaDev.Ptr + uint64(4*off), DType: cuda.I32, Len: len(p)}
		off += len(p)
	}
	all, err := b.metaDev.Slice(0, total)
	if err != nil {
		return nil, err
	}
	if err := b.dev.UploadAsync(all, b.metaHost, 0); err != nil {
		return nil, fmt.Errorf("cuda step: %w", err)
	}
	b.cur = &step{meta: meta, tokens: views[0], positions: views[1], slots: views[2], queryStarts: views[3],
		contextLens: views[4], blockTables: views[5], logitsIndices: views[6], tokenTypes: views[7], loraSlots: views[8], loraRanks: views[9], loraOrder: views[10], loraTiles: views[11],
		maxBlocks: stride, query: query, graphable: graphable}
	return b.cur, nil
}

// CopyBlocks copies whole blocks, keys and values, in every layer, in order on the stream.
func (b *Backend) CopyBlocks(kv backend.KVCache, copies []backend.BlockCopy) error {
	c, _, err := kvOf("copy blocks", kv, -1)
	if err != nil {
		return err
	}
	s := c.spec
	segs := blockSegs(s)
	for _, op := range copies {
		if op.Src < 0 || op.Dst < 0 || int(op.Src) >= s.NumBlocks || int(op.Dst) >= s.NumBlocks {
			return fmt.Errorf("cuda copy blocks: block %d to %d: outside the cache's %d blocks", op.Src, op.Dst, s.NumBlocks)
		}
		for _, l := range c.layers {
			for _, sg := range segs {
				buf, per := segBuffer(l, sg.part), sg.elems
				src, err1 := buf.Slice(int(op.Src)*per, int(op.Src+1)*per)
				dst, err2 := buf.Slice(int(op.Dst)*per, int(op.Dst+1)*per)
				if err := firstErr(err1, err2); err != nil {
					return err
				}
				if err := b.dev.CopyAsync(dst, src); err != nil {
					return fmt.Errorf("cuda copy blocks: %w", err)
				}
			}
		}
	}
	return nil
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
