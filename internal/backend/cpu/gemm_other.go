//go:build !amd64

package cpu

// gemmTileKernels returns the micro-kernels of the many-token path: the pure-Go ones on
// this architecture.
func gemmTileKernels(k *kernels) gemmKernels { return genericGemmKernels() }
