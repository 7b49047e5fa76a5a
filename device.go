package kvasir

import (
	"fmt"
	"strconv"
	"strings"
)

// Device is where a model runs: the CPU (the zero value), or NVIDIA GPUs through CUDA.
type Device struct {
	// CUDA is set for a GPU.
	CUDA bool
	// Ordinal is the GPU's index; a model split across ranks runs on GPUs Ordinal,
	// Ordinal+1, ... (0 on the CPU).
	Ordinal int
}

// ParseDevice reads a device name: "cpu" (or ""), "cuda" (GPU 0) or "cuda:N".
func ParseDevice(s string) (Device, error) {
	switch s {
	case "", "cpu":
		return Device{}, nil
	case "cuda":
		return Device{CUDA: true}, nil
	}
	if n, ok := strings.CutPrefix(s, "cuda:"); ok {
		if i, err := strconv.Atoi(n); err == nil && i >= 0 && strconv.Itoa(i) == n {
			return Device{CUDA: true, Ordinal: i}, nil
		}
	}
	return Device{}, fmt.Errorf("device %q: want cpu, cuda or cuda:N", s)
}

// String returns the device's name as ParseDevice reads it.
func (d Device) String() string {
	switch {
	case !d.CUDA:
		return "cpu"
	case d.Ordinal == 0:
		return "cuda"
	}
	return "cuda:" + strconv.Itoa(d.Ordinal)
}
