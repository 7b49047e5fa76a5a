package main

import (
	"flag"
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/model"
)

// deviceFlag adds --device to fs: where the model runs.
func deviceFlag(fs *flag.FlagSet) *string {
	return fs.String("device", "cpu", "where the model runs: cpu, or cuda (an NVIDIA GPU; cuda:N for device N)")
}

// gpuMemoryFlag adds --gpu-memory-utilization to fs: how much of a GPU's memory to use.
func gpuMemoryFlag(fs *flag.FlagSet) *float64 {
	return fs.Float64("gpu-memory-utilization", 0.9, "with --device cuda: fraction of the GPU's memory to use for weights, KV cache and activations; the KV cache gets what the weights leave (ignored when --kv-cache-memory is set)")
}

// openBackend returns the backend named by a --device value: nil for cpu (the model makes
// its own CPU backend from --threads), a CUDA backend for cuda or cuda:N. The caller
// closes a non-nil backend after the model or engine that uses it.
func openBackend(device string) (backend.Backend, error) {
	switch {
	case device == "" || device == "cpu":
		return nil, nil
	case device == "cuda":
		return openCUDA(0)
	}
	var ordinal int
	if _, err := fmt.Sscanf(device, "cuda:%d", &ordinal); err == nil {
		return openCUDA(ordinal)
	}
	return nil, fmt.Errorf("--device %q: want cpu, cuda or cuda:N", device)
}

// openCUDA opens CUDA device ordinal, with a clear error when CUDA is missing.
func openCUDA(ordinal int) (backend.Backend, error) {
	b, err := cuda.NewBackend(cuda.BackendOptions{Ordinal: ordinal})
	if err != nil {
		return nil, fmt.Errorf("--device cuda: %w", err)
	}
	return b, nil
}

// uploadProgress returns a progress bar's update function for copying weights to a device
// backend, and a function that removes the bar; on the CPU (be nil) weights are used in
// place, so there is nothing to show.
func uploadProgress(be backend.Backend, total int64) (update func(done, total int64), finish func()) {
	if be == nil {
		return nil, func() {}
	}
	bar := newProgress("uploading weights", total, false)
	return bar.Update, bar.Finish
}

// closeBackend closes be when it is not nil.
func closeBackend(be backend.Backend) {
	if be != nil {
		be.Close()
	}
}

// backendInfo describes where m runs: its CPU pool or the device backend be.
func backendInfo(m *model.Model, be backend.Backend) (threads int, kernels string) {
	if p := m.Pool(); p != nil {
		return p.Threads(), p.KernelSet()
	}
	if be != nil {
		return 0, be.Name()
	}
	return 0, "unknown"
}
