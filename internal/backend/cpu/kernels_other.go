//go:build !amd64

package cpu

// platformKernels returns the SIMD kernel sets of this architecture: none yet.
func platformKernels() []*kernels { return nil }

// platformSets names the SIMD kernel sets of this architecture: none yet.
func platformSets() []kernelSetNeeds { return nil }
