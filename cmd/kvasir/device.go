package main

import (
	"flag"
	"fmt"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// placement is where a model runs and how its KV cache is held: the --device,
// --tensor-parallel-size, --pipeline-parallel-size and --kv-cache-dtype flags of the
// commands that load a model.
type placement struct {
	device       *string
	tensor, pipe *int
	kvDType      *string
}

// placementFlags adds --device, --tensor-parallel-size, --pipeline-parallel-size and
// --kv-cache-dtype to fs.
func placementFlags(fs *flag.FlagSet) *placement {
	return &placement{
		device:  fs.String("device", "cpu", "where the model runs: cpu, or cuda (an NVIDIA GPU; cuda:N for device N, the first of a split model's GPUs)"),
		tensor:  fs.Int("tensor-parallel-size", 1, "split every layer's heads and MLP across this many ranks (GPUs, or CPU thread groups), summed by all-reduce"),
		pipe:    fs.Int("pipeline-parallel-size", 1, "split the layers into this many pipeline stages, one rank (or tensor-parallel group) each"),
		kvDType: fs.String("kv-cache-dtype", "auto", "KV cache element type: auto (f32 on the CPU, bf16 on a GPU), f32, f16 (half the memory of f32) or bf16 (GPU only)"),
	}
}

// kvCacheDType returns the KV cache element type the flags ask for on the device they
// name: the CPU cache holds f32 or f16.
func (p *placement) kvCacheDType() (quant.Type, error) {
	dt, err := model.ParseKVCacheDType(*p.kvDType)
	if err != nil {
		return 0, fmt.Errorf("--kv-cache-dtype: %w", err)
	}
	if dt == quant.BF16 && p.onCPU() {
		return 0, fmt.Errorf("--kv-cache-dtype bf16: the CPU cache holds f32 or f16")
	}
	return dt, nil
}

// onCPU reports whether --device names the CPU.
func (p *placement) onCPU() bool { return *p.device == "" || *p.device == "cpu" }

// parallel returns the split the flags ask for.
func (p *placement) parallel() model.Parallel {
	return model.Parallel{Tensor: *p.tensor, Pipeline: *p.pipe}
}

// open returns the backends the flags name: nil for cpu (the model makes its own CPU
// backends from --threads), or one CUDA backend per rank on consecutive devices from
// cuda:N. The caller closes them (closeBackends) after the model or engine that uses them.
func (p *placement) open() ([]backend.Backend, error) {
	par := p.parallel()
	if par.Tensor < 1 || par.Pipeline < 1 {
		return nil, fmt.Errorf("--tensor-parallel-size %d --pipeline-parallel-size %d: want sizes of at least 1", par.Tensor, par.Pipeline)
	}
	if _, err := p.kvCacheDType(); err != nil {
		return nil, err
	}
	device := *p.device
	first := 0
	switch {
	case p.onCPU():
		return nil, nil
	case device == "cuda":
	default:
		if _, err := fmt.Sscanf(device, "cuda:%d", &first); err != nil {
			return nil, fmt.Errorf("--device %q: want cpu, cuda or cuda:N", device)
		}
	}
	kvType := *p.kvDType // the CUDA backend's own default is bf16
	if kvType == "auto" {
		kvType = ""
	}
	var bes []backend.Backend
	for r := range par.Ranks() {
		b, err := cuda.NewBackend(cuda.BackendOptions{Ordinal: first + r, KVCacheType: kvType})
		if err != nil {
			closeBackends(bes)
			if par.Ranks() > 1 {
				return nil, fmt.Errorf("--device %s with %d ranks: rank %d on cuda:%d: %w", device, par.Ranks(), r, first+r, err)
			}
			return nil, fmt.Errorf("--device %s: %w", device, err)
		}
		bes = append(bes, b)
	}
	return bes, nil
}

// model binds fm's weights on the backends the flags name (a pool of threads workers on
// the CPU), with a progress bar while they upload to a device. It returns the backends,
// which the caller closes after the model (closeBackends); on failure none stays open.
func (p *placement) model(fm *format.Model, threads int) (*model.Model, []backend.Backend, error) {
	bes, err := p.open()
	if err != nil {
		return nil, nil, err
	}
	kvDType, _ := p.kvCacheDType() // checked by open
	update, finish := uploadProgress(bes, fm.Bytes())
	m, err := model.New(fm, model.Options{Threads: threads, Backends: bes, Parallel: p.parallel(), Progress: update, KVCacheDType: kvDType})
	finish()
	if err != nil {
		closeBackends(bes)
		return nil, nil, err
	}
	return m, bes, nil
}

// engine starts an engine on fm with opt on the backends the flags name, as model does;
// the flags fill in opt's backends, split and upload progress. On failure no backend
// stays open and fm is still the caller's to close.
func (p *placement) engine(fm *format.Model, opt kvasir.Options) (*kvasir.Engine, []backend.Backend, error) {
	bes, err := p.open()
	if err != nil {
		return nil, nil, err
	}
	update, finish := uploadProgress(bes, fm.Bytes())
	opt.Backends, opt.TensorParallel, opt.PipelineParallel, opt.UploadProgress = bes, *p.tensor, *p.pipe, update
	opt.KVCacheDType = *p.kvDType
	e, err := kvasir.OpenModel(fm, opt)
	finish()
	if err != nil {
		closeBackends(bes)
		return nil, nil, err
	}
	return e, bes, nil
}

// gpuMemoryFlag adds --gpu-memory-utilization to fs: how much of a GPU's memory to use.
func gpuMemoryFlag(fs *flag.FlagSet) *float64 {
	return fs.Float64("gpu-memory-utilization", 0.9, "with --device cuda: fraction of the GPU's memory to use for weights, KV cache and activations; the KV cache gets what the weights leave (ignored when --kv-cache-memory is set)")
}

// uploadProgress returns a progress bar's update function for copying weights to device
// backends, and a function that removes the bar; on the CPU (bes nil) weights are used in
// place, so there is nothing to show.
func uploadProgress(bes []backend.Backend, total int64) (update func(done, total int64), finish func()) {
	if bes == nil {
		return nil, func() {}
	}
	bar := newProgress("uploading weights", total, false)
	return bar.Update, bar.Finish
}

// closeBackends closes the backends of bes.
func closeBackends(bes []backend.Backend) {
	for _, be := range bes {
		be.Close()
	}
}

// backendInfo describes where m runs: its CPU pool (threads per rank) or the device
// backends bes, and how it is split when it is.
func backendInfo(m *model.Model, bes []backend.Backend) (threads int, kernels string) {
	kernels = "unknown"
	if p := m.Pool(); p != nil {
		threads, kernels = p.Threads(), p.KernelSet()
	} else if len(bes) > 0 {
		kernels = bes[0].Name()
	}
	return threads, kernels
}

// splitInfo describes how m is split across ranks, "" when it is not.
func splitInfo(m *model.Model) string {
	par := m.Parallel()
	if par.Ranks() == 1 {
		return ""
	}
	return fmt.Sprintf(", split across %d ranks (tensor-parallel %d x pipeline-parallel %d)", par.Ranks(), par.Tensor, par.Pipeline)
}
