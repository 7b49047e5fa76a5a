package cpu

import (
	"fmt"
	"os"
)

// kernels is one set of inner-loop kernels. Every set computes the same functions; a set is
// chosen per Pool, at start-up, by CPU feature (see platformKernels), so that tests can run
// every set side by side. Adding an AVX-512 set means adding one more entry to
// platformKernels.
//
// Quantized dot kernels take nb blocks of weights w in the weight type's GGML block format
// and nb blocks of activations x in the paired activation format (Q8_0 for Q8_0/Q4_0 weights,
// Q8_K for Q4_K/Q6_K weights). Activation quants must lie in [-127, 127] (the quantizers in
// package quant guarantee it): the SIMD kernels rely on it for exact 16-bit pair sums.
type kernels struct {
	name string

	dotF32  func(w, x []float32) float32 // sum w[i]*x[i] over len(x)
	dotF16  func(w []byte, x []float32) float32
	dotBF16 func(w []byte, x []float32) float32
	dotQ8_0 func(w, x []byte, nb int) float32
	dotQ4_0 func(w, x []byte, nb int) float32
	dotQ4K  func(w, x []byte, nb int) float32
	dotQ6K  func(w, x []byte, nb int) float32

	// axpy adds a*x to y over len(x).
	axpy func(y []float32, a float32, x []float32)
}

// genericName is the name of the pure-Go kernel set.
const genericName = "generic"

// genericKernels returns the pure-Go kernel set, the scalar twin of every SIMD kernel.
func genericKernels() *kernels {
	return &kernels{
		name:    genericName,
		dotF32:  dotF32Generic,
		dotF16:  dotF16Generic,
		dotBF16: dotBF16Generic,
		dotQ8_0: dotQ8_0Generic,
		dotQ4_0: dotQ4_0Generic,
		dotQ4K:  dotQ4KGeneric,
		dotQ6K:  dotQ6KGeneric,
		axpy:    axpyGeneric,
	}
}

// allKernels returns every kernel set this CPU can run, fastest first, generic last.
func allKernels() []*kernels {
	return append(platformKernels(), genericKernels())
}

// KernelSets returns the names of the kernel sets this CPU can run, fastest first; the last
// is always "generic".
func KernelSets() []string {
	var names []string
	for _, k := range allKernels() {
		names = append(names, k.name)
	}
	return names
}

// defaultKernels returns the fastest kernel set, or the generic one when KVASIR_CPU=generic.
func defaultKernels() *kernels {
	if os.Getenv("KVASIR_CPU") == genericName {
		return genericKernels()
	}
	return allKernels()[0]
}

func kernelsByName(name string) (*kernels, error) {
	for _, k := range allKernels() {
		if k.name == name {
			return k, nil
		}
	}
	return nil, fmt.Errorf("cpu: kernel set %q is not available on this CPU (have %v)", name, KernelSets())
}
