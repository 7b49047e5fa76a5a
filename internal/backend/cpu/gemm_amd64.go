package cpu

import "unsafe"

// gemmTileKernels returns the micro-kernels of the many-token path that go with kernel set k:
// the AVX2 ones for the AVX2 set, the same with the 16-token tile on Z registers for the
// AVX-512 set, the pure-Go twins otherwise.
func gemmTileKernels(k *kernels) gemmKernels {
	switch k.name {
	case avx512Name:
		return gemmKernels{tile16: gemmT16x6AVX512Slice, tile8: gemmT8x6AVX2Slice, prefetch: prefetchAVX2Slice}
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
