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
		budget, err := kvBudget(free, total, util)
		if err != nil {
			return 0, fmt.Errorf("rank %d: %w", i, err)
		}
		if i == 0 || budget < least {
			least = budget
		}
	}
	return least, nil
}

// kvBudget returns util (0: DefaultGPUMemoryUtilization) of a device's total memory, less
// what is already in use and a reserve for activations: what the KV cache may take.
func kvBudget(free, total int64, util float64) (int64, error) {
	if util == 0 {
		util = DefaultGPUMemoryUtilization
	}
	if util <= 0 || util > 1 {
		return 0, fmt.Errorf("gpu memory utilization %g: want a fraction in (0, 1]", util)
	}
	used := total - free
	budget := int64(util*float64(total)) - used - activationReserve
	if budget <= 0 {
		return 0, fmt.Errorf("no device memory left for the KV cache: %.1f GiB of %.1f GiB in use after the weights, utilization %g (raise --gpu-memory-utilization or use a smaller model)",
			float64(used)/(1<<30), float64(total)/(1<<30), util)
	}
	return budget, nil
}
