package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// platformKernels returns the SIMD kernel sets this amd64 CPU supports, fastest first.
// An AVX-512 set would go in front of the AVX2 one.
func platformKernels() []*kernels {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasAVX && hasF16C() {
		return []*kernels{avx2Kernels()}
	}
	return nil
}

// hasF16C reports F16C support (CPUID leaf 1, ECX bit 29), which x/sys/cpu does not expose.
func hasF16C() bool { return cpuidECX1()&(1<<29) != 0 }

// cpuidECX1 returns ECX of CPUID leaf 1.
func cpuidECX1() uint32

func avx2Kernels() *kernels {
	return &kernels{
		name:    "avx2",
		dotF32:  dotF32AVX2Slice,
		dotF16:  dotF16AVX2Slice,
		dotBF16: dotBF16AVX2Slice,
		dotQ8_0: dotQ8_0AVX2Slice,
		dotQ4_0: dotQ4_0AVX2Slice,
		dotQ4K:  dotQ4KAVX2Slice,
		dotQ6K:  dotQ6KAVX2Slice,
		axpy:    axpyAVX2Slice,
	}
}

// Assembly kernels (dot_amd64.s). Float kernels handle n rounded down to a multiple of 8;
// the Go wrappers finish the tail. Quantized kernels take whole blocks.

//go:noescape
func dotF32AVX2(w, x *float32, n int) float32

//go:noescape
func dotF16AVX2(w *byte, x *float32, n int) float32

//go:noescape
func dotBF16AVX2(w *byte, x *float32, n int) float32

//go:noescape
func dotQ8_0AVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ4_0AVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ4KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ6KAVX2(w, x *byte, nb int) float32

//go:noescape
func axpyAVX2(y *float32, a float32, x *float32, n int)

func dotF32AVX2Slice(w, x []float32) float32 {
	n := len(x)
	w = w[:n]
	m := n &^ 7
	var s float32
	if m > 0 {
		s = dotF32AVX2(unsafe.SliceData(w), unsafe.SliceData(x), m)
	}
	for i := m; i < n; i++ {
		s += w[i] * x[i]
	}
	return s
}

func dotF16AVX2Slice(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	m := n &^ 7
	var s float32
	if m > 0 {
		s = dotF16AVX2(unsafe.SliceData(w), unsafe.SliceData(x), m)
	}
	for i := m; i < n; i++ {
		s += f16At(w[2*i:]) * x[i]
	}
	return s
}

func dotBF16AVX2Slice(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	m := n &^ 7
	var s float32
	if m > 0 {
		s = dotBF16AVX2(unsafe.SliceData(w), unsafe.SliceData(x), m)
	}
	for i := m; i < n; i++ {
		s += bf16At(w[2*i:]) * x[i]
	}
	return s
}

func dotQ8_0AVX2Slice(w, x []byte, nb int) float32 {
	if nb <= 0 {
		return 0
	}
	_, _ = w[nb*q8_0Bytes-1], x[nb*q8_0Bytes-1]
	return dotQ8_0AVX2(unsafe.SliceData(w), unsafe.SliceData(x), nb)
}

func dotQ4_0AVX2Slice(w, x []byte, nb int) float32 {
	if nb <= 0 {
		return 0
	}
	_, _ = w[nb*q4_0Bytes-1], x[nb*q8_0Bytes-1]
	return dotQ4_0AVX2(unsafe.SliceData(w), unsafe.SliceData(x), nb)
}

func dotQ4KAVX2Slice(w, x []byte, nb int) float32 {
	if nb <= 0 {
		return 0
	}
	_, _ = w[nb*q4KBytes-1], x[nb*q8KBytes-1]
	return dotQ4KAVX2(unsafe.SliceData(w), unsafe.SliceData(x), nb)
}

func dotQ6KAVX2Slice(w, x []byte, nb int) float32 {
	if nb <= 0 {
		return 0
	}
	_, _ = w[nb*q6KBytes-1], x[nb*q8KBytes-1]
	return dotQ6KAVX2(unsafe.SliceData(w), unsafe.SliceData(x), nb)
}

func axpyAVX2Slice(y []float32, a float32, x []float32) {
	n := len(x)
	y = y[:n]
	m := n &^ 7
	if m > 0 {
		axpyAVX2(unsafe.SliceData(y), a, unsafe.SliceData(x), m)
	}
	for i := m; i < n; i++ {
		y[i] += a * x[i]
	}
}
