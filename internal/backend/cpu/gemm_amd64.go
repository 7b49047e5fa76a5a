package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// gemmTileKernels returns the micro-kernels of the many-token path that go with kernel set k:
// the AVX2 ones for the AVX2 set, the same with the 16-token tile on Z registers for the
// AVX-512 set (and the BF16 path's kernels where the CPU has AVX512-BF16, taken on AMD's
// CPUs: see bf16Fast), the pure-Go twins otherwise.
func gemmTileKernels(k *kernels) gemmKernels {
	switch k.name {
	case avx512Name:
		g := gemmKernels{tile16: gemmT16x6AVX512Slice, tile8: gemmT8x6AVX2Slice, prefetch: prefetchAVX2Slice}
		if cpu.X86.HasAVX512BF16 {
			g.bf16Fast = bf16Fast
			g.bf16x16 = func(w []byte, ldw int, xp []uint32, k2 int, acc []float32) {
				gemmBF16AVX512(gemmBF16T16x6AVX512, gemmWide, w, ldw, xp, k2, acc)
			}
			g.bf16x8 = func(w []byte, ldw int, xp []uint32, k2 int, acc []float32) {
				gemmBF16AVX512(gemmBF16T8x6AVX512, gemmNarrow, w, ldw, xp, k2, acc)
			}
		}
		return g
	case "avx2":
		return gemmKernels{tile16: gemmT16x6AVX2Slice, tile8: gemmT8x6AVX2Slice, prefetch: prefetchAVX2Slice}
	}
	return genericGemmKernels()
}

// Assembly micro-kernels (gemm_amd64.s); see gemmTGeneric for what they compute.

//go:noescape
func gemmT16x6AVX2(w *float32, ldw int, xt *float32, k int, acc *float32)

//go:noescape
func gemmT8x6AVX2(w *float32, ldw int, xt *float32, k int, acc *float32)

func gemmT16x6AVX2Slice(w []float32, ldw int, xt []float32, k int, acc []float32) {
	if k <= 0 {
		clear(acc[:gemmRows*16])
		return
	}
	_, _, _ = w[(gemmRows-1)*ldw+k-1], xt[16*k-1], acc[gemmRows*16-1]
	gemmT16x6AVX2(unsafe.SliceData(w), ldw, unsafe.SliceData(xt), k, unsafe.SliceData(acc))
}

//go:noescape
func gemmT16x6AVX512(w *float32, ldw int, xt *float32, k int, acc *float32)

func gemmT16x6AVX512Slice(w []float32, ldw int, xt []float32, k int, acc []float32) {
	if k <= 0 {
		clear(acc[:gemmRows*16])
		return
	}
	_, _, _ = w[(gemmRows-1)*ldw+k-1], xt[16*k-1], acc[gemmRows*16-1]
	gemmT16x6AVX512(unsafe.SliceData(w), ldw, unsafe.SliceData(xt), k, unsafe.SliceData(acc))
}

func gemmT8x6AVX2Slice(w []float32, ldw int, xt []float32, k int, acc []float32) {
	if k <= 0 {
		clear(acc[:gemmRows*8])
		return
	}
	_, _, _ = w[(gemmRows-1)*ldw+k-1], xt[8*k-1], acc[gemmRows*8-1]
	gemmT8x6AVX2(unsafe.SliceData(w), ldw, unsafe.SliceData(xt), k, unsafe.SliceData(acc))
}

//go:noescape
func prefetchAVX2(p *byte, n int)

func prefetchAVX2Slice(b []byte) {
	if len(b) > 0 {
		prefetchAVX2(unsafe.SliceData(b), len(b))
	}
}

// bf16Fast reports whether VDPBF16PS on Z registers is fast enough for the BF16 path to
// beat the FMA tile on widened panels. On AMD's Zen 4 (docs/BENCHMARKS.md, issue 22's third
// section) it issues as often as an FMA and does twice the work: 128-token BF16 products
// ran at 1.8x the FMA path's GFLOP/s. On the Intel Xeon of the first issue-22 section it
// issued once per 3.4 cycles and made BF16 prefill slower, so Intel's CPUs keep the FMA path.
var bf16Fast = isAMD()

//go:noescape
func gemmBF16T16x6AVX512(w *byte, ldw int, xp *uint32, k2 int, acc *float32)

//go:noescape
func gemmBF16T8x6AVX512(w *byte, ldw int, xp *uint32, k2 int, acc *float32)

// gemmBF16AVX512 checks the bounds of a BF16 micro-kernel of width tokens and calls it.
func gemmBF16AVX512(kernel func(w *byte, ldw int, xp *uint32, k2 int, acc *float32), width int,
	w []byte, ldw int, xp []uint32, k2 int, acc []float32) {
	if k2 <= 0 {
		clear(acc[:gemmRows*width])
		return
	}
	_, _, _ = w[(gemmRows-1)*ldw+4*k2-1], xp[width*k2-1], acc[gemmRows*width-1]
	kernel(unsafe.SliceData(w), ldw, unsafe.SliceData(xp), k2, unsafe.SliceData(acc))
}
