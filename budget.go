package kvasir

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
)

// activationReserve is the device memory kept back from the KV cache for activations,
// logits and cuBLAS workspaces.
const activationReserve = 2 << 30

// deviceKVBudget returns the KV cache bytes each device backend of bes can give after the
// weights (see kvBudget; the least of them), or 0 for backends without memory of their own
// (the CPU).
func deviceKVBudget(bes []backend.Backend, util float64) (int64, error) {
	var least int64
	for i, be := range bes {
		r, ok := be.(backend.MemoryReporter)
		if !ok {
			return 0, nil
		}
		free, total, err := r.MemoryInfo()
		if err != nil {
			return 0, err
		}
		budget, err := kvBudget(free, total, r.AllocatedBytes(), util)
		if err != nil {
			return 0, fmt.Errorf("rank %d: %w", i, err)
		}
		if i == 0 || budget < least {
			least = budget
		}
	}
	return least, nil
}

// kvBudget returns what the KV cache of a process may take on a device of total bytes, free
// of them free now, own of them this process's (the weights): util (0:
// DefaultGPUMemoryUtilization) of the total is this process's share, as vLLM's
// gpu_memory_utilization is, so that two processes at 0.45 share one GPU; the cache gets the
// share less what the process holds and a reserve for activations, and never more than is
// free.
func kvBudget(free, total, own int64, util float64) (int64, error) {
	if util == 0 {
		util = DefaultGPUMemoryUtilization
	}
	if util <= 0 || util > 1 {
		return 0, fmt.Errorf("gpu memory utilization %g: want a fraction in (0, 1]", util)
	}
	budget := min(int64(util*float64(total))-own, free) - activationReserve
	if budget <= 0 {
		others := max(0, total-free-own)
		return 0, fmt.Errorf("no device memory left for the KV cache: the weights take %.1f GiB of the %.1f GiB share (utilization %g of %.1f GiB); %.1f GiB is free and %.1f GiB is used by other processes (raise --gpu-memory-utilization, set --kv-cache-memory or use a smaller model)",
			float64(own)/(1<<30), util*float64(total)/(1<<30), util, float64(total)/(1<<30), float64(free)/(1<<30), float64(others)/(1<<30))
	}
	return budget, nil
}
