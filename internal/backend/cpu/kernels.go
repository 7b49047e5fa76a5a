package cpu

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// kernels is one set of inner-loop kernels. Every set computes the same functions; a set is
// chosen per Pool, at start-up, by CPU feature (see platformKernels), so that tests can run
// every set side by side (platformSets names the sets of the architecture and what each
// needs, so that tests can say which they could not run).
//
// Quantized dot kernels take nb blocks of weights w in the weight type's GGML block format
// and nb blocks of activations x in the paired activation format (Q8_0 for the 32-element
// block types, Q8_K for the K-quants). Activation quants must lie in [-127, 127] (the quantizers in
// package quant guarantee it): the SIMD kernels rely on it for exact 16-bit pair sums.
type kernels struct {
	name string

	dotF32  func(w, x []float32) float32 // sum w[i]*x[i] over len(x)
	dotF16  func(w []byte, x []float32) float32
	dotBF16 func(w []byte, x []float32) float32
	dotQ4K  func(w, x []byte, nb int) float32
	dotQ5K  func(w, x []byte, nb int) float32
	dotQ6K  func(w, x []byte, nb int) float32
	dotQ5_0 func(w, x []byte, nb int) float32 // Q8_0 activations
	dotQ5_1 func(w, x []byte, nb int) float32 // Q8_0 activations
	dotQ4_1 func(w, x []byte, nb int) float32 // Q8_0 activations

	// rows8Q8_0 and rows8Q4_0 are the kernels of Q8_0 and Q4_0 products of fewer than
	// q0MinTokens tokens (see matMulQ0): out[i] = the dot of the weight row at w[i*stride:] with the Q8_0
	// activations x over nb blocks, for 8 rows at once, each bit for bit as dotQ8_0Generic
	// or dotQ4_0Generic computes it (integer block sums, float32 scaling in block order).
	rows8Q8_0 func(w []byte, stride int, x []byte, nb int, out []float32)
	rows8Q4_0 func(w []byte, stride int, x []byte, nb int, out []float32)

	// The kernels of the many-token Q8_0/Q4_0 path (gemm_q0.go): panelQ8_0 and panelQ4_0
	// widen nb blocks of q0Rows weight rows (stride bytes apart) into a panel, as
	// q8PanelGeneric and q4PanelGeneric do; tileQ8_0 and tileQ4_0 add a panel's products
	// with a packed group of wd = 8 or 16 tokens to acc, bit for bit as q0TileGeneric.
	panelQ8_0 func(pw []byte, dw []float32, w []byte, stride, nb int)
	panelQ4_0 func(pw []byte, dw []float32, w []byte, stride, nb int)
	tileQ8_0  func(wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32)
	tileQ4_0  func(wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32)
	// q8Quads says the set's Q8_0 panels and tiles take Q4_0's layout (q0Form): panelQ8_0
	// stores each quant plus 128 as an unsigned byte, as q8PanelU8Generic does, the
	// activations are packed in int8 quads with corrections 128*sum(x), and tileQ8_0 is a
	// Q4_0 tile (VNNI's VPDPBUSD: four products per lane and instruction where the int16
	// pairs' VPDPWSSD adds two). The sums are the same exact integers.
	q8Quads bool
	// storeQ0Tile16 writes a whole tile (q0Rows rows of gemmWide tokens, acc[r*16+t]) to
	// out, token t's rows at out[t*ldo:], as storeQ0Tile does.
	storeQ0Tile16 func(out []float32, ldo int, acc []float32)

	// gemv4F32, gemv4F16 and gemv4BF16 are the float matrix-vector kernels: out[i] = dot
	// of the row at w[i*stride:] (bytes) with x over len(x), for 4 rows at once.
	gemv4F32  func(w []byte, stride int, x, out []float32)
	gemv4F16  func(w []byte, stride int, x, out []float32)
	gemv4BF16 func(w []byte, stride int, x, out []float32)
	// gemv4F32Multi, gemv4F16Multi and gemv4BF16Multi are gemv4F32, gemv4F16 and gemv4BF16
	// for nt = 2..maxMultiTokens tokens at once: token t's activations are x[t*xstride:][:n],
	// its 4 outputs out[t*ostride:], each bit for bit those of the one-token kernel. The
	// avx512 set reads the weights once for all the tokens (gemv_multi_avx512_amd64.s), the
	// avx2 set once from memory for up to 5 tokens and in two calls for 6 to 8, the second
	// finding the rows in L1 (gemv_multi_avx2_amd64.s); the generic set calls the one-token
	// kernel per token (gemv4Each).
	gemv4F32Multi  gemv4MultiFunc
	gemv4F16Multi  gemv4MultiFunc
	gemv4BF16Multi gemv4MultiFunc
	// multiFloat says the multi-token float kernels read the weights once for all their
	// tokens (rather than once per token): float products then stay off the GEMM for more
	// tokens (gemmMinTokens).
	multiFloat bool

	// axpy adds a*x to y over len(x).
	axpy func(y []float32, a float32, x []float32)

	// loraShrink and loraExpand are the two products of a LoRA update (lora.go), for 4
	// tokens of one adapter at a time. loraShrink sets u[4t+r] = a[r]·x[t] over len(x[t])
	// for tokens t < nt and ranks r < nr (every a[r] as long as the x[t]; a SIMD kernel
	// sets all 16, so the rows past nt and nr must be valid: repeats). loraExpand adds
	// sum_r u[t][r]*b[r*ldb+o] to out[t][o] for tokens t < nt and o < len(out[t]), over
	// r < len(u[t]) in order (b has len(u[t]) rows; the out[t] distinct). Each token's
	// results depend on its own operands only, not on the other tokens of the call.
	loraShrink func(x, a *[4][]float32, nt, nr int, u *[16]float32)
	loraExpand func(out, u *[4][]float32, nt int, b []float32, ldb int)

	// cvtF16 and cvtBF16 widen len(dst) half-precision values at src to float32.
	cvtF16  func(dst []float32, src []byte)
	cvtBF16 func(dst []float32, src []byte)

	// attnScores sets sc[j] = q . k[j*stride:][:len(q)] for j < len(sc); attnWsum adds
	// sum_j e[j] * v[j*stride:][:len(acc)] to acc for j < len(e).
	attnScores func(sc, q, k []float32, stride int)
	attnWsum   func(acc, e, v []float32, stride int)

	// attnScoresF16 and attnWsumF16 are attnScores and attnWsum over keys and values held
	// as little-endian halves (an F16 cache; stride in elements), equal bit for bit to
	// attnScores and attnWsum of the same set over a float32 copy of them.
	attnScoresF16 func(sc, q []float32, k []byte, stride int)
	attnWsumF16   func(acc, e []float32, v []byte, stride int)

	// dequantI8 writes rows head vectors of int8 codes, row r's at src[r*stride:], each of
	// groups groups of g codes whose scales are at scales[r*sstride:], to dst (rows x
	// groups x g values, row after row), code times scale. dequantF8 does the same for FP8
	// codes, a code's value formed by moving its exponent and mantissa bits shift places up
	// into a float32 and multiplying by mul (2^(127-bias): exact, subnormal codes included).
	// Both equal, bit for bit, the code's value in kvquant's table times the scale (a
	// quantized KV cache's dequantization).
	dequantI8 func(dst []float32, src []byte, stride int, scales []float32, sstride, rows, groups, g int)
	dequantF8 func(dst []float32, src []byte, stride int, scales []float32, sstride, rows, groups, g, shift int, mul float32)

	// prefetchRows hints that rows rows of n bytes, stride bytes apart, from x[0] on (as
	// far as x reaches) will be read soon: the SIMD sets start loading them into cache; it
	// changes no result.
	prefetchRows func(x []byte, stride, rows, n int)

	// quantQ8_0 quantizes len(src)/32 blocks of src into dst as Q8_0, bit-exactly as
	// quant.QuantizeBlockQ8_0 does.
	quantQ8_0 func(dst []byte, src []float32)

	// quantQ8_K quantizes len(src)/256 blocks of src into dst as Q8_K, bit-exactly as
	// quantQ8_KFast (and so quant.QuantizeBlockQ8_K) does.
	quantQ8_K func(dst []byte, src []float32)

	// The dequant kernels widen whole blocks of a quantized type to float32 for the GEMM
	// panels, bit-exactly as quant.Dequantize does.
	dequantQ4K  func(dst []float32, src []byte)
	dequantQ5K  func(dst []float32, src []byte)
	dequantQ6K  func(dst []float32, src []byte)
	dequantQ5_0 func(dst []float32, src []byte)
	dequantQ5_1 func(dst []float32, src []byte)
	dequantQ4_1 func(dst []float32, src []byte)
	// dequantFP8 widens one quant.FP8 row (its scale, then len(dst) E4M3 bytes) to
	// float32, bit-exactly as quant.Dequantize does for every byte but the NaN ones.
	dequantFP8 func(dst []float32, src []byte)
	// gemv4FP8 sets out[i] to the dot product of FP8 row i (4 rows of len(x) values, rows
	// stride bytes apart, each its scale then its bytes) with x, for i < 4.
	gemv4FP8 func(w []byte, stride int, x, out []float32)

	// exp sets dst[i] = e^src[i] over len(dst) in float32 (see expGeneric); dst may be src.
	exp func(dst, src []float32)

	// siluCombine sets out[i] = g[i] / (1 + e[i]) * u[i] over len(out), each operation
	// rounded to float32 (SwiGLU's last step, e holding exp(-g)); out may be g or u.
	siluCombine func(out, g, u, e []float32)
}

// genericName is the name of the pure-Go kernel set.
const genericName = "generic"

// genericKernels returns the pure-Go kernel set, the scalar twin of every SIMD kernel.
func genericKernels() *kernels {
	return withMultiEach(&kernels{
		name:    genericName,
		dotF32:  dotF32Generic,
		dotF16:  dotF16Generic,
		dotBF16: dotBF16Generic,
		dotQ4K:  dotQ4KGeneric,
		dotQ5K:  dotQ5KGeneric,
		dotQ6K:  dotQ6KGeneric,
		dotQ5_0: dotQ5_0Generic,
		dotQ5_1: dotQ5_1Generic,
		dotQ4_1: dotQ4_1Generic,
		axpy:    axpyGeneric,
		loraShrink: func(x, a *[4][]float32, nt, nr int, u *[16]float32) {
			loraShrinkDots(dotF32Generic, x, a, nt, nr, u)
		},
		loraExpand: func(out, u *[4][]float32, nt int, b []float32, ldb int) {
			loraExpandAxpys(axpyGeneric, out, u, nt, b, ldb)
		},
		gemv4F32: func(w []byte, stride int, x, out []float32) {
			for i := range out[:4] {
				out[i] = dotF32Generic(bytesAsF32(w[i*stride:])[:len(x)], x)
			}
		},
		gemv4F16: func(w []byte, stride int, x, out []float32) {
			for i := range out[:4] {
				out[i] = dotF16Generic(w[i*stride:], x)
			}
		},
		gemv4BF16: func(w []byte, stride int, x, out []float32) {
			for i := range out[:4] {
				out[i] = dotBF16Generic(w[i*stride:], x)
			}
		},
		rows8Q8_0: func(w []byte, stride int, x []byte, nb int, out []float32) {
			rows8Generic(dotQ8_0Generic, w, stride, x, nb, out)
		},
		rows8Q4_0: func(w []byte, stride int, x []byte, nb int, out []float32) {
			rows8Generic(dotQ4_0Generic, w, stride, x, nb, out)
		},
		panelQ8_0:     q8PanelGeneric,
		storeQ0Tile16: storeQ0Tile16Generic,
		panelQ4_0:     q4PanelGeneric,
		tileQ8_0: func(wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32) {
			q0TileGeneric(false, wd, pw, dw, xp, xs, nb, acc)
		},
		tileQ4_0: func(wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32) {
			q0TileGeneric(true, wd, pw, dw, xp, xs, nb, acc)
		},
		cvtF16:        cvtF16Generic,
		cvtBF16:       cvtBF16Generic,
		exp:           expGeneric,
		siluCombine:   siluCombineGeneric,
		prefetchRows:  prefetchNone,
		quantQ8_0:     quantQ8_0Generic,
		quantQ8_K:     quantQ8_KFast,
		dequantQ4K:    func(dst []float32, src []byte) { _ = quant.Dequantize(quant.Q4_K, src, dst) },
		dequantQ5K:    func(dst []float32, src []byte) { _ = quant.Dequantize(quant.Q5_K, src, dst) },
		dequantQ6K:    func(dst []float32, src []byte) { _ = quant.Dequantize(quant.Q6_K, src, dst) },
		dequantQ5_0:   func(dst []float32, src []byte) { _ = quant.Dequantize(quant.Q5_0, src, dst) },
		dequantQ5_1:   func(dst []float32, src []byte) { _ = quant.Dequantize(quant.Q5_1, src, dst) },
		dequantQ4_1:   func(dst []float32, src []byte) { _ = quant.Dequantize(quant.Q4_1, src, dst) },
		dequantFP8:    dequantFP8Generic,
		gemv4FP8:      gemv4FP8Generic,
		attnScores:    attnScoresGeneric,
		attnWsum:      attnWsumGeneric,
		attnScoresF16: attnScoresF16Generic,
		attnWsumF16:   attnWsumF16Generic,
		dequantI8:     dequantI8Generic,
		dequantF8:     dequantF8Generic,
	})
}

// maxMultiTokens is the most tokens a multi-token matrix-vector kernel
// (kernels.gemv4F16Multi and its twins) takes: the 1+7 tokens of a speculative verify step
// of 7 drafts.
const maxMultiTokens = 8

// multiRows4Tokens is the most tokens of a multi-token kernel of the avx512 set that serves
// 4 rows a call (gen_gemv_multi.go's rows4MaxTokens; 7 and 8 tokens leave registers for 2).
const multiRows4Tokens = 6

// gemv4MultiFunc is a multi-token float matrix-vector kernel (kernels.gemv4F16Multi).
type gemv4MultiFunc func(w []byte, stride int, x []float32, xstride, n, nt int, out []float32, ostride int)

// gemv4Each returns a multi-token kernel (kernels.gemv4F16Multi) that calls the
// one-token kernel one for each token.
func gemv4Each(one func(w []byte, stride int, x, out []float32)) gemv4MultiFunc {
	return func(w []byte, stride int, x []float32, xstride, n, nt int, out []float32, ostride int) {
		for t := range nt {
			one(w, stride, x[t*xstride:][:n], out[t*ostride:][:4])
		}
	}
}

// withMultiEach sets k's multi-token float kernels to calls of its one-token ones, token by
// token, and returns k.
func withMultiEach(k *kernels) *kernels {
	k.gemv4F32Multi = gemv4Each(k.gemv4F32)
	k.gemv4F16Multi = gemv4Each(k.gemv4F16)
	k.gemv4BF16Multi = gemv4Each(k.gemv4BF16)
	return k
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

// kernelsByName returns the kernel set called name, the fastest when name is "".
func kernelsByName(name string) (*kernels, error) {
	if name == "" {
		return allKernels()[0], nil
	}
	for _, k := range allKernels() {
		if k.name == name {
			return k, nil
		}
	}
	for _, s := range platformSets() {
		if s.name == name {
			return nil, fmt.Errorf("cpu: kernel set %q needs %s, which this CPU lacks (have %v)", name, s.needs, KernelSets())
		}
	}
	return nil, fmt.Errorf("cpu: kernel set %q is not available on this CPU (have %v)", name, KernelSets())
}

// kernelSetNeeds names a SIMD kernel set and the CPU features it needs.
type kernelSetNeeds struct {
	name, needs string
}
