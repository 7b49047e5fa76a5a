package cpu

//go:generate go run gen_gemv_multi.go

import (
	"unsafe"

	"github.com/kvasir-llm/kvasir/internal/quant"
	"golang.org/x/sys/cpu"
)

// avx512Name is the name of the AVX-512 kernel set.
const avx512Name = "avx512"

// hasAVX512 reports the features the avx512 set uses beyond avx2's: AVX-512 F, BW and VL
// (EVEX encodings of 256- and 512-bit integer operations, 32 vector registers) and VNNI
// (VPDPBUSD, VPDPWSSD). x/sys/cpu reports them only when the OS saves the AVX-512 state.
func hasAVX512() bool {
	x := cpu.X86
	return x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512VNNI
}

// avx512Kernels returns the AVX-512 set: the avx2 set with the kernels that AVX-512 and
// VNNI make faster replaced, each bit for bit equal to the kernel it replaces (the integer
// sums are exact either way and the float steps are the same), but for the LoRA shrink,
// whose dot products sum in 16 lanes where avx2's dotF32 sums in 32 (its expand is
// avx2's chain of fused multiply-adds, equal where the output's length is a multiple of 8).
//
// VPDPBUSD multiplies unsigned by signed bytes while Q8_0 weights and activations are both
// signed. The Q8_0 matrix-vector kernel shifts the weights by 128 (XOR 0x80) and subtracts
// 128 times the activations' sums, computed once per block for the 8 rows it serves; the
// alternative, moving the weights' signs onto the activations, costs an absolute value and
// a masked negation per row where the shift costs one XOR. Q4_0's nibbles are unsigned
// already (the matrix-vector kernel subtracts 8 times the activations' sums the same way),
// and the many-token tiles use the same shift: their Q8_0 panel holds the quants plus 128
// as unsigned bytes (q8Quads), so that Q8_0 runs on Q4_0's VPDPBUSD tile, four products
// per lane and instruction, where an int16 panel on VPDPWSSD adds two. The Q4_K and Q6_K
// dots keep avx2's int16 pairs and scale them with VPDPWSSD on Z registers
// (dotk_avx512_amd64.s); the Q5_0 dot loads its fifth bits into a mask register.
func avx512Kernels() *kernels {
	k := avx2Kernels()
	k.name = avx512Name
	k.rows8Q8_0 = func(w []byte, stride int, x []byte, nb int, out []float32) {
		rows8AVX2(rows8Q8_0VNNI, q8_0Bytes, w, stride, x, nb, out)
	}
	k.rows8Q4_0 = func(w []byte, stride int, x []byte, nb int, out []float32) {
		rows8AVX2(rows8Q4_0VNNI, q4_0Bytes, w, stride, x, nb, out)
	}
	k.q8Quads = true
	k.storeQ0Tile16 = storeQ0Tile16Z
	k.panelQ8_0 = func(pw []byte, dw []float32, w []byte, stride, nb int) {
		q0PanelAVX2(q8PanelU8AVX512, q8_0Bytes, 32, pw, dw, w, stride, nb)
	}
	k.tileQ8_0 = func(wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32) {
		q0TileAVX2(q4Tile16AVX512, q4Tile8AVX512, q0Steps4, 32, wd, pw, dw, xp, xs, nb, acc)
	}
	k.tileQ4_0 = func(wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32) {
		q0TileAVX2(q4Tile16AVX512, q4Tile8AVX512, q0Steps4, 32, wd, pw, dw, xp, xs, nb, acc)
	}
	k.dotQ4K = func(w, x []byte, nb int) float32 { return dotKAVX2(dotQ4KAVX512, q4KBytes, w, x, nb) }
	k.dotQ6K = func(w, x []byte, nb int) float32 { return dotKAVX2(dotQ6KAVX512, q6KBytes, w, x, nb) }
	k.dotQ5_0 = func(w, x []byte, nb int) float32 { return dotQ0Slice(dotQ5_0AVX512, q5_0Bytes, w, x, nb) }
	k.dequantFP8 = dequantFP8AVX512Slice
	k.gemv4FP8 = gemv4FP8AVX512
	k.multiFloat = true
	k.gemv4F32Multi = func(w []byte, stride int, x []float32, xstride, n, nt int, out []float32, ostride int) {
		gemv4MultiAsm(gemvMultiF32AVX512[:], 4, dotF32Bytes, w, stride, x, xstride, n, nt, out, ostride)
	}
	k.gemv4F16Multi = func(w []byte, stride int, x []float32, xstride, n, nt int, out []float32, ostride int) {
		gemv4MultiAsm(gemvMultiF16AVX512[:], 2, dotF16Generic, w, stride, x, xstride, n, nt, out, ostride)
	}
	k.gemv4BF16Multi = func(w []byte, stride int, x []float32, xstride, n, nt int, out []float32, ostride int) {
		gemv4MultiAsm(gemvMultiBF16AVX512[:], 2, dotBF16Generic, w, stride, x, xstride, n, nt, out, ostride)
	}
	k.loraShrink = loraShrinkAVX512
	k.loraExpand = loraExpandAVX512
	return k
}

// loraShrinkAVX512 is loraShrink on AVX-512 (lora_avx512_amd64.s): all 16 dot products
// (nt and nr aside) in one pass over the 4 tokens' activations, 16 lanes each, the tail
// under a mask.
func loraShrinkAVX512(x, a *[4][]float32, _, _ int, u *[16]float32) {
	n := len(x[0])
	var xp, ap [4]*float32
	for i := range 4 {
		if len(x[i]) != n || len(a[i]) < n || n == 0 {
			panic("cpu: lora shrink: rows of unequal lengths")
		}
		xp[i], ap[i] = unsafe.SliceData(x[i]), unsafe.SliceData(a[i])
	}
	loraShrink4x4AVX512(&xp, &ap, n, uint16(1)<<(n%16)-1, u)
}

// loraExpandAVX512 is loraExpand on AVX-512 (lora_avx512_amd64.s): the 4 tokens' outputs
// stay in registers over 64 columns while every rank is added; calls of fewer tokens
// repeat the last one (the kernel loads a block of every row before it stores any).
func loraExpandAVX512(out, u *[4][]float32, nt int, b []float32, ldb int) {
	n, rank := len(out[0]), len(u[0])
	if rank == 0 || n == 0 {
		return
	}
	if nt < 1 || nt > 4 || ldb < n || len(b) < (rank-1)*ldb+n {
		panic("cpu: lora expand: operands out of shape")
	}
	var op, up [4]*float32
	for i := range 4 {
		t := min(i, nt-1)
		if len(out[t]) != n || len(u[t]) != rank {
			panic("cpu: lora expand: rows of unequal lengths")
		}
		op[i], up[i] = unsafe.SliceData(out[t]), unsafe.SliceData(u[t])
	}
	loraExpand4AVX512(&op, &up, unsafe.SliceData(b), ldb, rank, n, uint16(1)<<(n%16)-1)
}

//go:noescape
func loraShrink4x4AVX512(x, a *[4]*float32, n int, mask uint16, u *[16]float32)

//go:noescape
func loraExpand4AVX512(out, u *[4]*float32, b *float32, ldb, rank, n int, mask uint16)

// gemv4FP8AVX512 is gemv4FP8 on AVX-512: the whole groups of 16 values of the 4 rows in
// one pass over x (fp8_avx512_amd64.s), the rest through the table, each sum times its
// row's scale.
func gemv4FP8AVX512(w []byte, stride int, x, out []float32) {
	n := len(x)
	m := n &^ 15
	var acc [4]float32
	if m > 0 {
		_ = w[3*stride+4+n-1]
		dot4FP8AVX512(&w[4], stride, unsafe.SliceData(x), m, &acc[0])
	}
	t := quant.E4M3Table()
	for i := range out[:4] {
		row := w[i*stride : i*stride+4+n]
		s := acc[i]
		for j := m; j < n; j++ {
			s += t[row[4+j]] * x[j]
		}
		out[i] = quant.FP8RowScale(row) * s
	}
}

//go:noescape
func dot4FP8AVX512(w *byte, stride int, x *float32, n int, out *float32)

// dequantFP8AVX512Slice is dequantFP8 on AVX-512: whole groups of 16 bytes in assembly
// (fp8_avx512_amd64.s), the rest through the table; bit for bit dequantFP8Generic for every
// byte but the NaN ones (which the assembly decodes as ±480).
func dequantFP8AVX512Slice(dst []float32, src []byte) {
	q := src[4 : 4+len(dst)]
	m := len(dst) &^ 15
	if m > 0 {
		dequantFP8AVX512(unsafe.SliceData(dst), unsafe.SliceData(q), m, quant.FP8RowScale(src))
	}
	s, t := quant.FP8RowScale(src), quant.E4M3Table()
	for i := m; i < len(dst); i++ {
		dst[i] = s * t[q[i]]
	}
}

//go:noescape
func dequantFP8AVX512(dst *float32, src *byte, n int, scale float32)

// Assembly kernels of the avx512 set (rows8_amd64.s, gemm_q0_avx512_amd64.s,
// dotk_avx512_amd64.s), with the arguments of the avx2 kernels they replace.

//go:noescape
func dotQ4KAVX512(w, x *byte, nb int) float32

//go:noescape
func dotQ6KAVX512(w, x *byte, nb int) float32

//go:noescape
func dotQ5_0AVX512(w, x *byte, nb int) float32

//go:noescape
func rows8Q8_0VNNI(w *byte, stride int, x *byte, nb int, out *float32)

//go:noescape
func rows4Q4_0VNNI(w *byte, stride int, x *byte, nb int, out *float32)

// rows8Q4_0VNNI is the 8-row Q4_0 kernel: two calls of the 4-row one.
func rows8Q4_0VNNI(w *byte, stride int, x *byte, nb int, out *float32) {
	rows4Q4_0VNNI(w, stride, x, nb, out)
	rows4Q4_0VNNI((*byte)(unsafe.Add(unsafe.Pointer(w), 4*stride)), stride, x, nb, (*float32)(unsafe.Add(unsafe.Pointer(out), 16)))
}

//go:noescape
func q8PanelU8AVX512(pw *byte, dw *float32, w *byte, stride int, nb int)

//go:noescape
func q4Tile16AVX512(pw *byte, dw *float32, xp *uint32, xs *uint32, nb int, acc *float32)

//go:noescape
func q4Tile8AVX512(pw *byte, dw *float32, xp *uint32, xs *uint32, nb int, acc *float32)

//go:noescape
func storeQ0Tile16AVX512(out *float32, ldo int, acc *float32)

// storeQ0Tile16Z checks the bounds of storeQ0Tile16AVX512 and calls it.
func storeQ0Tile16Z(out []float32, ldo int, acc []float32) {
	_, _ = out[(gemmWide-1)*ldo+q0Rows-1], acc[q0Rows*gemmWide-1]
	storeQ0Tile16AVX512(unsafe.SliceData(out), ldo, unsafe.SliceData(acc))
}
