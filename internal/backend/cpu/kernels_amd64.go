package cpu

import (
	"encoding/binary"
	"math"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// platformKernels returns the SIMD kernel sets this amd64 CPU supports, fastest first:
// avx512 (which builds on avx2), then avx2.
func platformKernels() []*kernels {
	if !hasAVX2() {
		return nil
	}
	if hasAVX512() {
		return []*kernels{avx512Kernels(), avx2Kernels()}
	}
	return []*kernels{avx2Kernels()}
}

// platformSets names every SIMD kernel set of amd64 and the CPU features it needs, fastest
// first, whether or not this CPU has them.
func platformSets() []kernelSetNeeds {
	return []kernelSetNeeds{
		{avx512Name, "AVX-512 F, BW, VL and VNNI"},
		{"avx2", "AVX, AVX2, FMA and F16C"},
	}
}

// hasAVX2 reports the features the avx2 set uses: AVX, AVX2, FMA and F16C.
func hasAVX2() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasAVX && hasF16C() }

// hasF16C reports F16C support (CPUID leaf 1, ECX bit 29), which x/sys/cpu does not expose.
func hasF16C() bool { return cpuidECX1()&(1<<29) != 0 }

// cpuidECX1 returns ECX of CPUID leaf 1.
func cpuidECX1() uint32

// cpuidVendor returns EBX, EDX and ECX of CPUID leaf 0: the vendor's name, 4 bytes each.
func cpuidVendor() (ebx, edx, ecx uint32)

// isAMD reports whether the CPU's vendor is AMD ("AuthenticAMD").
func isAMD() bool {
	b, d, c := cpuidVendor()
	return b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163 // "Auth", "enti", "cAMD"
}

// avx2Kernels returns the avx2 set. Its multi-token float kernels (gemv4MultiAsm) read
// each weight once from memory for 2 to 8 tokens.
func avx2Kernels() *kernels {
	k := &kernels{
		name:          "avx2",
		storeQ0Tile16: storeQ0Tile16Generic,
		dotF32:        dotF32AVX2Slice,
		dotF16:        dotF16AVX2Slice,
		dotBF16:       dotBF16AVX2Slice,
		dotQ4K:        dotQ4KAVX2Slice,
		dotQ5K:        func(w, x []byte, nb int) float32 { return dotKAVX2(dotQ5KAVX2, q5KBytes, w, x, nb) },
		dotQ6K:        dotQ6KAVX2Slice,
		dotQ5_0:       func(w, x []byte, nb int) float32 { return dotQ0Slice(dotQ5_0AVX2, q5_0Bytes, w, x, nb) },
		dotQ5_1:       func(w, x []byte, nb int) float32 { return dotQ0Slice(dotQ5_1AVX2, q5_1Bytes, w, x, nb) },
		dotQ4_1:       func(w, x []byte, nb int) float32 { return dotQ0Slice(dotQ4_1AVX2, q4_1Bytes, w, x, nb) },
		axpy:          axpyAVX2Slice,
		loraShrink: func(x, a *[4][]float32, nt, nr int, u *[16]float32) {
			loraShrinkDots(dotF32AVX2Slice, x, a, nt, nr, u)
		},
		loraExpand: func(out, u *[4][]float32, nt int, b []float32, ldb int) {
			loraExpandAxpys(axpyAVX2Slice, out, u, nt, b, ldb)
		},
		gemv4F32: func(w []byte, stride int, x, out []float32) {
			gemv4AVX2(gemv4F32AVX2, 4, dotF32Bytes, w, stride, x, out)
		},
		gemv4F16: func(w []byte, stride int, x, out []float32) {
			gemv4AVX2(gemv4F16AVX2, 2, dotF16Generic, w, stride, x, out)
		},
		gemv4BF16: func(w []byte, stride int, x, out []float32) {
			gemv4AVX2(gemv4BF16AVX2, 2, dotBF16Generic, w, stride, x, out)
		},
		rows8Q8_0: func(w []byte, stride int, x []byte, nb int, out []float32) {
			rows8AVX2(rows8Q8_0AVX2, q8_0Bytes, w, stride, x, nb, out)
		},
		rows8Q4_0: func(w []byte, stride int, x []byte, nb int, out []float32) {
			rows8AVX2(rows8Q4_0AVX2, q4_0Bytes, w, stride, x, nb, out)
		},
		panelQ8_0: func(pw []byte, dw []float32, w []byte, stride, nb int) {
			q0PanelAVX2(q8PanelAVX2, q8_0Bytes, 64, pw, dw, w, stride, nb)
		},
		panelQ4_0: func(pw []byte, dw []float32, w []byte, stride, nb int) {
			q0PanelAVX2(q4PanelAVX2, q4_0Bytes, 32, pw, dw, w, stride, nb)
		},
		tileQ8_0: func(wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32) {
			q0TileAVX2(q8Tile16AVX2, q8Tile8AVX2, q0Steps8, 64, wd, pw, dw, xp, xs, nb, acc)
		},
		tileQ4_0: func(wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32) {
			q0TileAVX2(q4Tile16AVX2, q4Tile8AVX2, q0Steps4, 32, wd, pw, dw, xp, xs, nb, acc)
		},
		cvtF16:        cvtF16AVX2Slice,
		cvtBF16:       cvtBF16AVX2Slice,
		exp:           expAVX2Slice,
		siluCombine:   siluCombineAVX2Slice,
		quantQ8_0:     quantQ8_0AVX2Slice,
		quantQ8_K:     quantQ8_KAVX2,
		dequantQ4K:    dequantQ4KAVX2,
		dequantQ5K:    genericKernels().dequantQ5K,
		dequantQ6K:    dequantQ6KAVX2,
		dequantQ5_0:   genericKernels().dequantQ5_0,
		dequantQ5_1:   genericKernels().dequantQ5_1,
		dequantQ4_1:   genericKernels().dequantQ4_1,
		dequantFP8:    dequantFP8Generic,
		gemv4FP8:      gemv4FP8Generic,
		attnScores:    attnScoresAVX2Slice,
		attnWsum:      attnWsumAVX2Slice,
		attnScoresF16: attnScoresF16AVX2Slice,
		attnWsumF16:   attnWsumF16AVX2Slice,
		dequantI8:     dequantI8AVX2Slice,
		dequantF8:     dequantF8AVX2Slice,
		prefetchRows:  prefetchRowsAVX2,
	}
	k.gemv4F32Multi = func(w []byte, stride int, x []float32, xstride, n, nt int, out []float32, ostride int) {
		gemv4MultiAsm(gemvMultiF32AVX2[:], 4, dotF32Bytes, w, stride, x, xstride, n, nt, out, ostride)
	}
	k.gemv4F16Multi = func(w []byte, stride int, x []float32, xstride, n, nt int, out []float32, ostride int) {
		gemv4MultiAsm(gemvMultiF16AVX2[:], 2, dotF16Generic, w, stride, x, xstride, n, nt, out, ostride)
	}
	k.gemv4BF16Multi = func(w []byte, stride int, x []float32, xstride, n, nt int, out []float32, ostride int) {
		gemv4MultiAsm(gemvMultiBF16AVX2[:], 2, dotBF16Generic, w, stride, x, xstride, n, nt, out, ostride)
	}
	return k
}

// gemvMultiKernel is a kernel of gemv_multi_avx2_amd64.s or gemv_multi_avx512_amd64.s
// (generated by gen_gemv_multi.go) and the weight rows it serves: 4, or 2 where its tokens'
// accumulators leave no registers for more.
type gemvMultiKernel struct {
	run  func(w *byte, stride int, x *float32, xstride int, n int, out *float32, ostride int)
	rows int
}

// tokenGroup returns how many of nt tokens (2..maxMultiTokens) the first call of a
// multi-token kernel serving at most most tokens takes: all of them when it can, else all
// but 3 (3, 4 or 5 of 6, 7 or 8 for the avx2 set's 5), leaving 3 for a second call, which
// finds the 4 rows in L1.
func tokenGroup(nt, most int) int {
	if nt <= most {
		return nt
	}
	return nt - 3
}

// gemv4MultiAsm is a multi-token kernel (kernels.gemv4F16Multi) over the assembly kernels
// ks of one weight type, by token count, es bytes a weight: it checks the bounds, runs the
// tokens in one or two groups (tokenGroup) over the multiple of 32 weights of the 4 rows
// and finishes each token's tail with tail, as gemv4AVX2 does.
func gemv4MultiAsm(ks []gemvMultiKernel, es int, tail func(w []byte, x []float32) float32,
	w []byte, stride int, x []float32, xstride, n, nt int, out []float32, ostride int) {
	if nt < 2 || nt > maxMultiTokens {
		panic("cpu: gemv4Multi: want 2 to 8 tokens")
	}
	_ = w[3*stride+es*n-1]
	_ = x[(nt-1)*xstride+n-1]
	_ = out[(nt-1)*ostride+3]
	m := n &^ 31
	if m > 0 {
		for t := 0; t < nt; {
			g := tokenGroup(nt-t, len(ks)-1)
			k := ks[g]
			for r := 0; r < 4; r += k.rows {
				k.run(&w[r*stride], stride, &x[t*xstride], 4*xstride, m, &out[t*ostride+r], 4*ostride)
			}
			t += g
		}
	} else {
		for t := range nt {
			clear(out[t*ostride : t*ostride+4])
		}
	}
	if m < n {
		for t := range nt {
			xt := x[t*xstride:][:n]
			for i := range 4 {
				out[t*ostride+i] += tail(w[i*stride+es*m:], xt[m:])
			}
		}
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
func dotQ4KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ5KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ6KAVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ5_0AVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ5_1AVX2(w, x *byte, nb int) float32

//go:noescape
func dotQ4_1AVX2(w, x *byte, nb int) float32

//go:noescape
func cvtF16AVX2(dst *float32, src *byte, n int)

//go:noescape
func dequantI8AVX2(dst *float32, src *byte, stride int, scales *float32, sstride, rows, groups, gsz int)

//go:noescape
func dequantF8AVX2(dst *float32, src *byte, stride int, scales *float32, sstride, rows, groups, gsz, shift int, mul float32)

//go:noescape
func cvtBF16AVX2(dst *float32, src *byte, n int)

//go:noescape
func expAVX2(dst, src *float32, n int)

//go:noescape
func rows8Q8_0AVX2(w *byte, stride int, x *byte, nb int, out *float32)

//go:noescape
func rows4Q4_0AVX2(w *byte, stride int, x *byte, nb int, out *float32)

// rows8Q4_0AVX2 is the 8-row Q4_0 kernel: two calls of the 4-row one.
func rows8Q4_0AVX2(w *byte, stride int, x *byte, nb int, out *float32) {
	rows4Q4_0AVX2(w, stride, x, nb, out)
	rows4Q4_0AVX2((*byte)(unsafe.Add(unsafe.Pointer(w), 4*stride)), stride, x, nb, (*float32)(unsafe.Add(unsafe.Pointer(out), 16)))
}

//go:noescape
func attnScores4AVX2(sc, q, k *float32, stride, n, hd int)

//go:noescape
func attnWsumAVX2(acc, e, v *float32, stride, n, hd int)

//go:noescape
func quantizeQ8_0AVX2(dst *byte, src *float32, nb int)

//go:noescape
func absMaxAVX2(src *float32, n int) float32

//go:noescape
func quantQ8KBodyAVX2(dst *byte, src *float32, iscale float32)

//go:noescape
func gemv4F32AVX2(w *byte, stride int, x *float32, n int, out *float32)

//go:noescape
func gemv4F16AVX2(w *byte, stride int, x *float32, n int, out *float32)

//go:noescape
func gemv4BF16AVX2(w *byte, stride int, x *float32, n int, out *float32)

//go:noescape
func dequantQ4KBodyAVX2(dst *float32, qs *byte, sc, mn *float32)

//go:noescape
func dequantQ6KBodyAVX2(dst *float32, b *byte, sc *float32)

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

func dotQ4KAVX2Slice(w, x []byte, nb int) float32 { return dotKAVX2(dotQ4KAVX2, q4KBytes, w, x, nb) }

func dotQ6KAVX2Slice(w, x []byte, nb int) float32 { return dotKAVX2(dotQ6KAVX2, q6KBytes, w, x, nb) }

// dotQ0Slice checks the bounds of a dot kernel of a 32-element block type with weight
// blocks of wb bytes (activations in Q8_0) and calls it.
func dotQ0Slice(kernel func(w, x *byte, nb int) float32, wb int, w, x []byte, nb int) float32 {
	if nb <= 0 {
		return 0
	}
	_, _ = w[nb*wb-1], x[nb*q8_0Bytes-1]
	return kernel(unsafe.SliceData(w), unsafe.SliceData(x), nb)
}

// dotKAVX2 checks the bounds of a K-quant dot kernel with weight blocks of wb bytes
// (activations in Q8_K) and calls it.
func dotKAVX2(kernel func(w, x *byte, nb int) float32, wb int, w, x []byte, nb int) float32 {
	if nb <= 0 {
		return 0
	}
	_, _ = w[nb*wb-1], x[nb*q8KBytes-1]
	return kernel(unsafe.SliceData(w), unsafe.SliceData(x), nb)
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

// dequantFits reports whether the assembly dequantization kernels can take the
// arguments: groups of a multiple of 8 codes, and slices that hold every row.
func dequantFits(dst []float32, src []byte, stride int, scales []float32, sstride, rows, groups, g int) bool {
	return rows > 0 && groups > 0 && g > 0 && g%8 == 0 && len(dst) >= rows*groups*g &&
		len(src) >= (rows-1)*stride+groups*g && len(scales) >= (rows-1)*sstride+groups
}

func dequantI8AVX2Slice(dst []float32, src []byte, stride int, scales []float32, sstride, rows, groups, g int) {
	if !dequantFits(dst, src, stride, scales, sstride, rows, groups, g) {
		dequantI8Generic(dst, src, stride, scales, sstride, rows, groups, g)
		return
	}
	dequantI8AVX2(unsafe.SliceData(dst), unsafe.SliceData(src), stride, unsafe.SliceData(scales), sstride, rows, groups, g)
}

func dequantF8AVX2Slice(dst []float32, src []byte, stride int, scales []float32, sstride, rows, groups, g, shift int, mul float32) {
	if !dequantFits(dst, src, stride, scales, sstride, rows, groups, g) {
		dequantF8Generic(dst, src, stride, scales, sstride, rows, groups, g, shift, mul)
		return
	}
	dequantF8AVX2(unsafe.SliceData(dst), unsafe.SliceData(src), stride, unsafe.SliceData(scales), sstride, rows, groups, g, shift, mul)
}

func cvtF16AVX2Slice(dst []float32, src []byte) {
	n := len(dst)
	src = src[:2*n]
	m := n &^ 7
	if m > 0 {
		cvtF16AVX2(unsafe.SliceData(dst), unsafe.SliceData(src), m)
	}
	cvtF16Generic(dst[m:], src[2*m:])
}

func cvtBF16AVX2Slice(dst []float32, src []byte) {
	n := len(dst)
	src = src[:2*n]
	m := n &^ 7
	if m > 0 {
		cvtBF16AVX2(unsafe.SliceData(dst), unsafe.SliceData(src), m)
	}
	cvtBF16Generic(dst[m:], src[2*m:])
}

// rows8AVX2 checks the bounds of an 8-row quantized kernel with weight blocks of wb bytes
// (activations in Q8_0) and calls it.
func rows8AVX2(kernel func(w *byte, stride int, x *byte, nb int, out *float32), wb int, w []byte, stride int, x []byte, nb int, out []float32) {
	out = out[:rows8]
	if nb <= 0 {
		clear(out)
		return
	}
	_, _ = w[(rows8-1)*stride+nb*wb-1], x[nb*q8_0Bytes-1]
	kernel(unsafe.SliceData(w), stride, unsafe.SliceData(x), nb, unsafe.SliceData(out))
}

func expAVX2Slice(dst, src []float32) {
	n := len(dst)
	src = src[:n]
	m := n &^ 7
	if m > 0 {
		expAVX2(unsafe.SliceData(dst), unsafe.SliceData(src), m)
	}
	expGeneric(dst[m:], src[m:])
}

func attnScoresAVX2Slice(sc, q, k []float32, stride int) {
	n, hd := len(sc), len(q)
	m := n &^ 3
	if m == 0 || hd%8 != 0 {
		attnScoresGeneric(sc, q, k, stride)
		return
	}
	_ = k[(m-1)*stride+hd-1]
	attnScores4AVX2(unsafe.SliceData(sc), unsafe.SliceData(q), unsafe.SliceData(k), stride, m, hd)
	for j := m; j < n; j++ {
		sc[j] = dotF32AVX2Slice(k[j*stride:][:hd], q)
	}
}

func attnWsumAVX2Slice(acc, e, v []float32, stride int) {
	n, hd := len(e), len(acc)
	if n == 0 || hd%8 != 0 {
		attnWsumGeneric(acc, e, v, stride)
		return
	}
	_ = v[(n-1)*stride+hd-1]
	attnWsumAVX2(unsafe.SliceData(acc), unsafe.SliceData(e), unsafe.SliceData(v), stride, n, hd)
}

func attnScoresF16AVX2Slice(sc, q []float32, k []byte, stride int) {
	n, hd := len(sc), len(q)
	m := n &^ 3
	if m == 0 || hd%8 != 0 {
		attnScoresF16Generic(sc, q, k, stride)
		return
	}
	_ = k[2*((m-1)*stride+hd)-1]
	attnScores4F16AVX2(unsafe.SliceData(sc), unsafe.SliceData(q), unsafe.SliceData(k), stride, m, hd)
	var buf [attnRowBuf]float32
	row := rowBuf(&buf, hd)
	for j := m; j < n; j++ {
		cvtF16AVX2Slice(row, k[2*j*stride:])
		sc[j] = dotF32AVX2Slice(row, q)
	}
}

func attnWsumF16AVX2Slice(acc, e []float32, v []byte, stride int) {
	n, hd := len(e), len(acc)
	if n == 0 || hd%8 != 0 {
		attnWsumF16Generic(acc, e, v, stride)
		return
	}
	_ = v[2*((n-1)*stride+hd)-1]
	attnWsumF16AVX2(unsafe.SliceData(acc), unsafe.SliceData(e), unsafe.SliceData(v), stride, n, hd)
}

func quantQ8_0AVX2Slice(dst []byte, src []float32) {
	nb := len(src) / 32
	if nb == 0 {
		return
	}
	_ = dst[nb*q8_0Bytes-1]
	quantizeQ8_0AVX2(unsafe.SliceData(dst), unsafe.SliceData(src), nb)
}

// quantQ8_KAVX2 quantizes len(src)/256 blocks into dst as Q8_K, bit for bit as
// quantQ8_KFast: the largest magnitude and the quants in assembly, the signed value of the
// largest magnitude (its first occurrence) and the scale in Go.
func quantQ8_KAVX2(dst []byte, src []float32) {
	for b := range len(src) / 256 {
		x := (*[256]float32)(src[256*b:])
		out := (*[q8KBytes]byte)(dst[q8KBytes*b:])
		amax := absMaxAVX2(&x[0], 256)
		if amax == 0 {
			clear(out[:])
			continue
		}
		var mx float32
		for _, v := range x {
			if math.Float32frombits(math.Float32bits(v)&^(1<<31)) == amax {
				mx = v
				break
			}
		}
		iscale := -127 / mx
		quantQ8KBodyAVX2(&out[0], &x[0], iscale)
		binary.LittleEndian.PutUint32(out[0:], math.Float32bits(1/iscale))
	}
}

// gemv4AVX2 checks the bounds of a 4-row float matrix-vector kernel over weights of es bytes
// per element, runs it over the multiple of 32 elements and finishes the tail with tail.
func gemv4AVX2(kernel func(w *byte, stride int, x *float32, n int, out *float32), es int,
	tail func(w []byte, x []float32) float32, w []byte, stride int, x, out []float32) {
	n := len(x)
	out = out[:4]
	_ = w[3*stride+n*es-1]
	m := n &^ 31
	if m > 0 {
		kernel(unsafe.SliceData(w), stride, unsafe.SliceData(x), m, unsafe.SliceData(out))
	} else {
		clear(out)
	}
	if m < n {
		for i := range out {
			out[i] += tail(w[i*stride+m*es:], x[m:])
		}
	}
}

// dotF32Bytes is dotF32Generic over weights given as bytes.
func dotF32Bytes(w []byte, x []float32) float32 { return dotF32Generic(bytesAsF32(w)[:len(x)], x) }

// dequantQ4KAVX2 widens len(dst)/256 Q4_K blocks: the sub-block scales and mins in Go, the
// 256 values of each block in assembly.
func dequantQ4KAVX2(dst []float32, src []byte) {
	var sc, mn [8]float32
	for b := range len(dst) / 256 {
		blk := (*[q4KBytes]byte)(src[b*q4KBytes:])
		q4KScales(blk, &sc, &mn)
		y := dst[256*b : 256*b+256]
		dequantQ4KBodyAVX2(unsafe.SliceData(y), &blk[16], &sc[0], &mn[0])
	}
}

// dequantQ6KAVX2 widens len(dst)/256 Q6_K blocks: the 16 scales in Go, the 256 values of
// each block in assembly.
func dequantQ6KAVX2(dst []float32, src []byte) {
	var sc [16]float32
	for b := range len(dst) / 256 {
		blk := (*[q6KBytes]byte)(src[b*q6KBytes:])
		d := f16At(blk[208:])
		for i := range sc {
			sc[i] = d * float32(int8(blk[192+i]))
		}
		y := dst[256*b : 256*b+256]
		dequantQ6KBodyAVX2(unsafe.SliceData(y), &blk[0], &sc[0])
	}
}

//go:noescape
func q8PanelAVX2(pw *byte, dw *float32, w *byte, stride int, nb int)

//go:noescape
func q4PanelAVX2(pw *byte, dw *float32, w *byte, stride int, nb int)

//go:noescape
func q8Tile16AVX2(pw *byte, dw *float32, xp *uint32, xs *uint32, nb int, acc *float32)

//go:noescape
func q8Tile8AVX2(pw *byte, dw *float32, xp *uint32, xs *uint32, nb int, acc *float32)

//go:noescape
func q4Tile16AVX2(pw *byte, dw *float32, xp *uint32, xs *uint32, nb int, acc *float32)

//go:noescape
func q4Tile8AVX2(pw *byte, dw *float32, xp *uint32, xs *uint32, nb int, acc *float32)

// q0PanelAVX2 checks the bounds of a panel kernel (weight blocks of wb bytes, widened to
// pb bytes per row) and calls it.
func q0PanelAVX2(kernel func(pw *byte, dw *float32, w *byte, stride int, nb int), wb, pb int,
	pw []byte, dw []float32, w []byte, stride, nb int) {
	if nb <= 0 {
		return
	}
	_, _, _ = pw[nb*q0Rows*pb-1], dw[nb*q0Rows-1], w[(q0Rows-1)*stride+nb*wb-1]
	kernel(unsafe.SliceData(pw), unsafe.SliceData(dw), unsafe.SliceData(w), stride, nb)
}

// q0TileAVX2 checks the bounds of a tile kernel (wide for 16 tokens, narrow for 8; steps
// lane groups per block, pb panel bytes per row and block) and calls it.
func q0TileAVX2(wide, narrow func(pw *byte, dw *float32, xp *uint32, xs *uint32, nb int, acc *float32), steps, pb int,
	wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32) {
	if nb <= 0 {
		return
	}
	kernel, kw := narrow, gemmNarrow
	if wd == gemmWide {
		kernel, kw = wide, gemmWide
	}
	_, _, _ = pw[nb*q0Rows*pb-1], dw[nb*q0Rows-1], acc[q0Rows*kw-1]
	_, _ = xp[nb*steps*kw-1], xs[nb*2*kw-1]
	kernel(unsafe.SliceData(pw), unsafe.SliceData(dw), unsafe.SliceData(xp), unsafe.SliceData(xs), nb, unsafe.SliceData(acc))
}

//go:noescape
func siluCombineAVX2(out, gate, up, e *float32, n int)

func siluCombineAVX2Slice(out, g, u, e []float32) {
	n := len(out)
	g, u, e = g[:n], u[:n], e[:n]
	m := n &^ 7
	if m > 0 {
		siluCombineAVX2(unsafe.SliceData(out), unsafe.SliceData(g), unsafe.SliceData(u), unsafe.SliceData(e), m)
	}
	siluCombineGeneric(out[m:], g[m:], u[m:], e[m:])
}

//go:noescape
func attnScores4F16AVX2(sc, q *float32, k *byte, stride, n, hd int)

//go:noescape
func attnWsumF16AVX2(acc, e *float32, v *byte, stride, n, hd int)

//go:noescape
func prefetchRowsT0(p *byte, stride, rows, lines int)

// prefetchRowsAVX2 asks the memory system for rows rows of n bytes, stride bytes apart,
// from x[0] on, clipped to x, so that reading them soon after finds them in cache.
func prefetchRowsAVX2(x []byte, stride, rows, n int) {
	if rows <= 0 || n <= 0 || stride < 0 {
		return
	}
	if stride > 0 {
		rows = min(rows, (len(x)-n)/stride+1)
	}
	if rows <= 0 || len(x) < n {
		return
	}
	prefetchRowsT0(unsafe.SliceData(x), stride, rows, (n+63)/64)
}
