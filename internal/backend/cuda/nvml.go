package cuda

import (
	"fmt"
	"sync"
)

// NVML holds the entry points of NVIDIA's management library that read a GPU's energy,
// bound from libnvidia-ml.so.1 (which the driver installs) with purego, as the CUDA
// libraries are. NVML numbers GPUs as nvidia-smi does, regardless of CUDA_VISIBLE_DEVICES.
type NVML struct {
	lib *library

	nvmlInit                            func() int32
	nvmlShutdown                        func() int32
	nvmlDeviceGetCount                  func(n *uint32) int32
	nvmlDeviceGetHandleByIndex          func(i uint32, dev *uintptr) int32
	nvmlDeviceGetTotalEnergyConsumption func(dev uintptr, mJ *uint64) int32
	nvmlErrorString                     func(r int32) *byte

	mu      sync.Mutex
	handles map[int]uintptr
}

// nvmlLibNames lists the names libnvidia-ml is looked up under, in order.
var nvmlLibNames = []string{"libnvidia-ml.so.1", "libnvidia-ml.so"}

// OpenNVML loads libnvidia-ml.so.1, binds the calls NVML's users need and initializes it.
// Without the library (no NVIDIA driver) it returns an error that says so.
func OpenNVML() (*NVML, error) { return openNVML(nvmlLibNames) }

// openNVML is OpenNVML over the given library names.
func openNVML(names []string) (*NVML, error) {
	lib, err := openLibrary("NVML", names)
	if err != nil {
		return nil, fmt.Errorf("cuda: NVML (libnvidia-ml.so.1) not found: %w", err)
	}
	n := &NVML{lib: lib, handles: map[int]uintptr{}}
	if err := lib.bind([]symbol{
		{&n.nvmlInit, "nvmlInit_v2"},
		{&n.nvmlShutdown, "nvmlShutdown"},
		{&n.nvmlDeviceGetCount, "nvmlDeviceGetCount_v2"},
		{&n.nvmlDeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2"},
		{&n.nvmlDeviceGetTotalEnergyConsumption, "nvmlDeviceGetTotalEnergyConsumption"},
		{&n.nvmlErrorString, "nvmlErrorString"},
	}); err != nil {
		return nil, err
	}
	if err := n.check("nvmlInit", n.nvmlInit()); err != nil {
		return nil, err
	}
	return n, nil
}

// check turns an NVML return code into an error naming the call (nil for NVML_SUCCESS).
func (n *NVML) check(call string, r int32) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("cuda: %s: %s (NVML error %d)", call, cGoString(n.nvmlErrorString(r)), r)
}

// DeviceCount returns how many GPUs NVML sees.
func (n *NVML) DeviceCount() (int, error) {
	var c uint32
	if err := n.check("nvmlDeviceGetCount", n.nvmlDeviceGetCount(&c)); err != nil {
		return 0, err
	}
	return int(c), nil
}

// TotalEnergy returns GPU i's energy counter: millijoules since the driver was loaded
// (Volta and later; older GPUs answer NVML_ERROR_NOT_SUPPORTED).
func (n *NVML) TotalEnergy(i int) (uint64, error) {
	n.mu.Lock()
	h, ok := n.handles[i]
	if !ok {
		if err := n.check("nvmlDeviceGetHandleByIndex", n.nvmlDeviceGetHandleByIndex(uint32(i), &h)); err != nil {
			n.mu.Unlock()
			return 0, err
		}
		n.handles[i] = h
	}
	n.mu.Unlock()
	var mJ uint64
	if err := n.check("nvmlDeviceGetTotalEnergyConsumption", n.nvmlDeviceGetTotalEnergyConsumption(h, &mJ)); err != nil {
		return 0, err
	}
	return mJ, nil
}

// Close shuts NVML down.
func (n *NVML) Close() error { return n.check("nvmlShutdown", n.nvmlShutdown()) }
