package energy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// gpuCounter is one GPU's NVML total energy counter.
type gpuCounter struct {
	nvml  *cuda.NVML
	index int
	start uint64 // millijoules when opened
}

// NVML opens the energy counters of the GPUs NVML sees (all of the machine's, whatever
// CUDA_VISIBLE_DEVICES says), or says why there are none.
func NVML() ([]Counter, error) {
	n, err := cuda.OpenNVML()
	if err != nil {
		if strings.HasPrefix(err.Error(), "cuda: NVML (libnvidia-ml.so.1) not found") {
			return nil, errors.New("no NVML (libnvidia-ml.so.1 does not load: no NVIDIA driver)")
		}
		return nil, err
	}
	count, err := n.DeviceCount()
	if err != nil {
		n.Close()
		return nil, err
	}
	var out []Counter
	for i := 0; i < count; i++ {
		mJ, err := n.TotalEnergy(i)
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("NVML GPU %d: %w", i, err)
		}
		out = append(out, &gpuCounter{nvml: n, index: i, start: mJ})
	}
	if len(out) == 0 {
		n.Close()
		return nil, fmt.Errorf("NVML sees no GPU")
	}
	return out, nil
}

func (g *gpuCounter) Name() string { return fmt.Sprintf("nvml GPU %d", g.index) }

// Joules reads the counter.
func (g *gpuCounter) Joules() (float64, error) {
	mJ, err := g.nvml.TotalEnergy(g.index)
	if err != nil {
		return 0, err
	}
	return float64(mJ-g.start) / 1e3, nil
}
