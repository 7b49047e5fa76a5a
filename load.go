package kvasir

import (
	"fmt"
	"runtime"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/backend/cudabackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// Loaded is a model bound to the backends Options name, with its tokenizer: what an
// Engine runs, and what a kernel-level benchmark drives without one (model.Session).
type Loaded struct {
	fm       *format.Model
	m        *model.Model
	tok      *tokenizer.Tokenizer // nil when the file has no vocabulary
	bes      []backend.Backend
	owned    bool       // the backends were made here and are closed by Close
	kvDType  quant.Type // the element type of the KV caches the model makes
	onDevice bool       // the backends have memory of their own (a GPU's)
}

// Load makes the backends opt names (or takes opt.Backends), binds fm's weights on them
// and makes fm's tokenizer. The Loaded takes ownership of fm and closes it on Close; on
// failure fm is still the caller's.
func Load(fm *format.Model, opt Options) (*Loaded, error) {
	opt = envOverrides(opt)
	l := &Loaded{fm: fm}
	if fm.Vocab != nil {
		var err error
		if l.tok, err = tokenizer.New(fm.Vocab); err != nil {
			return nil, fmt.Errorf("open %s: %w", fm.Path, err)
		}
	}
	var err error
	if opt.Quantization > QuantizationFP8 {
		return nil, fmt.Errorf("open %s: quantization %s: unknown", fm.Path, opt.Quantization)
	}
	if l.kvDType, err = opt.KVCacheDType.On(opt.Device); err != nil {
		return nil, fmt.Errorf("open %s: %w", fm.Path, err)
	}
	par := model.Parallel{Tensor: opt.TensorParallel, Pipeline: opt.PipelineParallel}
	if opt.TensorParallel < 0 || opt.PipelineParallel < 0 {
		return nil, fmt.Errorf("open %s: tensor-parallel size %d, pipeline-parallel size %d: want sizes of at least 1", fm.Path, opt.TensorParallel, opt.PipelineParallel)
	}
	l.bes = opt.Backends
	if l.bes == nil {
		if l.bes, err = newBackends(opt, par.Ranks()); err != nil {
			return nil, fmt.Errorf("open %s: %w", fm.Path, err)
		}
		l.owned = true
	}
	_, l.onDevice = l.bes[0].(backend.MemoryReporter)
	l.m, err = model.New(fm, model.Options{Backends: l.bes, Parallel: par, KVCacheDType: l.kvDType, Progress: opt.UploadProgress,
		FP8: opt.Quantization == QuantizationFP8})
	if err != nil {
		l.closeBackends()
		return nil, err
	}
	for r, be := range l.bes {
		if s, ok := be.(interface{ SparseSummary() string }); ok && opt.Log != nil {
			if line := s.SparseSummary(); line != "" {
				fmt.Fprintf(opt.Log, "rank %d: %s\n", r, line)
			}
		}
	}
	return l, nil
}

// newBackends makes one backend per rank on opt.Device: CPU backends sharing opt.Threads,
// or CUDA backends on consecutive GPUs from the device's ordinal.
func newBackends(opt Options, ranks int) ([]backend.Backend, error) {
	var bes []backend.Backend
	fail := func(err error) ([]backend.Backend, error) {
		for _, be := range bes {
			be.Close()
		}
		return nil, err
	}
	threads := opt.Threads
	if threads < 1 {
		threads = runtime.NumCPU()
	}
	var quantGEMV *cuda.GEMVLayout
	if opt.CUDA.QuantGEMV != "" {
		l, err := cuda.ParseGEMVLayout(opt.CUDA.QuantGEMV)
		if err != nil {
			return nil, err
		}
		quantGEMV = &l
	}
	sparse, err := cudabackend.ParseSparseMode(opt.CUDA.Sparse2of4)
	if err != nil {
		return nil, err
	}
	for r := range ranks {
		if !opt.Device.CUDA {
			b, err := cpubackend.NewKernels(max(threads/ranks, 1), opt.CPUKernels)
			if err != nil {
				return fail(err)
			}
			b.SetCopyWeights(!opt.CPUWeightsInPlace)
			bes = append(bes, b)
			continue
		}
		ordinal := opt.Device.Ordinal + r
		b, err := cudabackend.NewBackend(cudabackend.BackendOptions{Ordinal: ordinal,
			OpTime: opt.CUDA.OpTime, DisablePDL: opt.CUDA.DisablePDL, DisableShadows: opt.CUDA.DisableShadows,
			WidenQuantized: opt.CUDA.WidenQuantized, RepackQuantized: !opt.CUDA.KeepGGMLLayout, QuantGEMV: quantGEMV, Sparse2of4: sparse, Log: opt.Log})
		if err != nil {
			if ranks > 1 {
				return fail(fmt.Errorf("device %s with %d ranks: rank %d on cuda:%d: %w", opt.Device, ranks, r, ordinal, err))
			}
			return fail(fmt.Errorf("device %s: %w", opt.Device, err))
		}
		bes = append(bes, b)
	}
	return bes, nil
}

// NewCPUPool starts a CPU worker pool as Load starts those of its CPU backends: Threads
// workers (0: all cores) on the kernel set CPUKernels names, or KVASIR_CPU overrides (the
// other options are not used). It is for kernel-level benchmarks; the caller closes it.
func NewCPUPool(opt Options) (*cpu.Pool, error) {
	opt = envOverrides(opt)
	p, err := cpu.NewPoolKernels(opt.Threads, opt.CPUKernels)
	if err != nil {
		return nil, fmt.Errorf("cpu pool: %w", err)
	}
	return p, nil
}

// Close releases the model and the backends Load made, then closes the model file.
func (l *Loaded) Close() error {
	l.m.Close()
	l.closeBackends()
	return l.fm.Close()
}

// closeBackends closes the backends Load made (not those passed in Options).
func (l *Loaded) closeBackends() {
	if !l.owned {
		return
	}
	for _, be := range l.bes {
		be.Close()
	}
}

// Model returns the bound model.
func (l *Loaded) Model() *model.Model { return l.m }

// File returns the opened model file.
func (l *Loaded) File() *format.Model { return l.fm }

// Tokenizer returns the model's tokenizer, nil when the file has no vocabulary.
func (l *Loaded) Tokenizer() *tokenizer.Tokenizer { return l.tok }

// OnDevice reports whether the model runs on a device with memory of its own (a GPU).
func (l *Loaded) OnDevice() bool { return l.onDevice }

// pool returns the worker pool of the first rank's CPU backend, nil when the model runs
// elsewhere.
func (l *Loaded) pool() *cpu.Pool {
	if cb, ok := l.bes[0].(*cpubackend.Backend); ok {
		return cb.Pool()
	}
	return nil
}

// Threads returns the CPU worker threads of each rank (0 when the model runs on a device).
func (l *Loaded) Threads() int {
	if p := l.pool(); p != nil {
		return p.Threads()
	}
	return 0
}

// KernelSet returns the CPU kernel set the model runs on ("avx2", "generic"), or the
// first backend's description when it runs elsewhere.
func (l *Loaded) KernelSet() string {
	if p := l.pool(); p != nil {
		return p.KernelSet()
	}
	return l.bes[0].Name()
}

// ProbeBandwidth measures the memory bandwidth in GB/s that the CPU threads running the
// model reach streaming a buffer of bytes: on its pool, or, when it is split across CPU
// ranks (each with a pool of its own), on a pool of all their threads at once. It is 0
// when the model runs on a device.
func (l *Loaded) ProbeBandwidth(bytes int) float64 {
	p := l.pool()
	if p == nil {
		return 0
	}
	if ranks := len(l.bes); ranks > 1 {
		all := cpu.NewPool(p.Threads() * ranks)
		defer all.Close()
		return cpu.ProbeBandwidth(all, bytes)
	}
	return cpu.ProbeBandwidth(p, bytes)
}
