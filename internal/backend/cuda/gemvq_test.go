package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/backendtest"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// gemvqTypes pairs each device block type with its GGML type, whose Go encoder makes the
// test weights and whose Go decoder is the reference.
var gemvqTypes = []struct {
	dt DType
	qt quant.Type
}{
	{Q8_0, quant.Q8_0}, {Q4_0, quant.Q4_0}, {Q4_1, quant.Q4_1}, {Q5_0, quant.Q5_0},
	{Q5_1, quant.Q5_1}, {Q4_K, quant.Q4_K}, {Q5_K, quant.Q5_K}, {Q6_K, quant.Q6_K},
	{Q2_K, quant.Q2_K}, {Q3_K, quant.Q3_K}, {Q8_0R, quant.Q8_0}, {Q6_KR, quant.Q6_K},
}

// fits reports whether rows of k values are whole blocks of dt (the repacked types'
// blocks are super-blocks of 256 and 2048 values).
func fits(dt DType, k int) bool {
	e, _, _ := dt.Block()
	return k%e == 0
}

// uploadQuant quantizes vals (rows of k) to qt on the host, uploads the blocks as dt
// (repacked for Q8_0R and Q6_KR), and returns the buffer with the values the blocks decode
// to on the host.
func (e *env) uploadQuant(t *testing.T, dt DType, qt quant.Type, vals []float32, k int) (Buffer, []float32) {
	t.Helper()
	rb, err := qt.RowBytes(len(vals))
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, rb)
	if err := quant.Quantize(qt, vals, raw); err != nil {
		t.Fatal(err)
	}
	held := make([]float32, len(vals))
	if err := quant.Dequantize(qt, raw, held); err != nil {
		t.Fatal(err)
	}
	if raw, err = Repack(dt, Unpacked(dt), raw, len(vals)/k, k); err != nil { // the reference decodes GGML's order
		t.Fatal(err)
	}
	var b Buffer
	e.do(t, func() error {
		var err error
		if b, err = e.dev.Alloc(dt, len(vals)); err != nil {
			return err
		}
		return Upload(e.dev, b, raw)
	})
	t.Cleanup(func() { e.dev.Do(func() error { return e.dev.Free(b) }) })
	return b, held
}

// testGEMVQ checks the quantized kernels of every block type against float64 references on
// the host decoder's values: the GEMV for every row count 1..8, the BF16 dequantization of
// a chunk of rows, and the embedding gather (with an id outside the vocabulary).
func testGEMVQ(t *testing.T, e *env, r *rand.Rand) {
	for _, ty := range gemvqTypes {
		for _, s := range []struct{ k, m int }{{512, 37}, {4096, 20}, {2304, 9}} {
			if !fits(ty.dt, s.k) {
				continue
			}
			xv := randVals(r, GEMVMaxRows*s.k, 1)
			x, xh := e.upload(t, F32, xv)
			w, wh := e.uploadQuant(t, ty.dt, ty.qt, randVals(r, s.m*s.k, 1), s.k)
			for _, l := range []GEMVLayout{GEMVSplit} {
				for n := 1; n <= GEMVMaxRows; n++ {
					y := e.poisoned(t, F32, n*s.m)
					e.do(t, func() error { return e.ops.GEMVQWith(l, y, x, w, n, s.k, s.m) })
					check(t, fmt.Sprintf("gemvq %s %s n=%d k=%d m=%d", l, ty.dt, n, s.k, s.m), F32, e.download(t, y), backendtest.MatMulRef(xh[:n*s.k], wh, n, s.k, s.m))
				}
			}
			rows := s.m - 2 // a chunk that starts at row 1 and stops short of the end
			part, err := w.Slice(s.k, (rows+1)*s.k)
			if err != nil {
				t.Fatal(err)
			}
			out := e.poisoned(t, BF16, rows*s.k)
			e.do(t, func() error { return e.ops.DequantizeBF16(out, part, rows, s.k) })
			check(t, fmt.Sprintf("dequant bf16 %s k=%d rows=%d", ty.dt, s.k, rows), BF16, e.download(t, out), f64(wh[s.k:(rows+1)*s.k]))

			tokens := []int32{int32(s.m - 1), 0, int32(s.m), 3}
			tok := e.uploadI32(t, tokens)
			emb := e.poisoned(t, F32, len(tokens)*s.k)
			e.do(t, func() error { return e.ops.Embedding(emb, w, tok, len(tokens), s.m, s.k) })
			want := make([]float64, len(tokens)*s.k)
			for i, id := range tokens {
				if id < int32(s.m) {
					copy(want[i*s.k:], f64(wh[int(id)*s.k:(int(id)+1)*s.k]))
				}
			}
			check(t, fmt.Sprintf("embedding %s dim=%d", ty.dt, s.k), F32, e.download(t, emb), want)
		}
	}
}

// testGEMVQMulti checks the multi-weight launch of each layout against the same weights
// one launch each: bit for bit, for every block type and row count.
func testGEMVQMulti(t *testing.T, e *env, r *rand.Rand) {
	ms := [GEMVMulti]int{37, 20, 9}
	x, _ := e.upload(t, F32, randVals(r, GEMVMaxRows*2048, 1))
	for _, ty := range gemvqTypes {
		k := 512
		if !fits(ty.dt, k) {
			k = 2048 // Q6_KR's super-blocks
		}
		var w [GEMVMulti]Buffer
		for j := range w {
			w[j], _ = e.uploadQuant(t, ty.dt, ty.qt, randVals(r, ms[j]*k, 1), k)
		}
		for _, l := range []GEMVLayout{GEMVSplit, GEMVSplitX8} {
			for n := 1; n <= GEMVMaxRows; n++ {
				var y, one [GEMVMulti]Buffer
				for j := range y {
					y[j], one[j] = e.poisoned(t, F32, n*ms[j]), e.poisoned(t, F32, n*ms[j])
				}
				e.do(t, func() error {
					for j := range w {
						if err := e.ops.GEMVQWith(l, one[j], x, w[j], n, k, ms[j]); err != nil {
							return err
						}
					}
					return e.ops.GEMVQMultiWith(l, y, x, w, n, k, ms)
				})
				for j := range y {
					if got, want := e.download(t, y[j]), e.download(t, one[j]); !slices.Equal(got, want) {
						t.Errorf("gemvq multi %s %s n=%d weight %d: differs from its own launch", l, ty.dt, n, j)
					}
				}
			}
		}
	}
	result(t, "kernel", "gemvq multi (split, split8) vs one launch a weight", "bit for bit", fmt.Sprintf("%d types x n=1..8", len(gemvqTypes)))
}

// quantX8 quantizes x (a multiple of 16 values) as quantize_x8_vals in gemvq.cuh does, in
// float32 with round-half-to-even: the signed bytes and a scale a unit of 16.
func quantX8(x []float32) ([]int8, []float32) {
	q, d := make([]int8, len(x)), make([]float32, len(x)/16)
	for u := range d {
		var amax float32
		for _, v := range x[16*u : 16*u+16] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		var id float32
		if amax > 0 {
			id = 127 / amax
		}
		for j, v := range x[16*u : 16*u+16] {
			q[16*u+j] = int8(math.RoundToEven(float64(v * id)))
		}
		d[u] = amax / 127
	}
	return q, d
}

// testGEMVQ8 checks the int8 layouts: the activations' quantization against quantX8 (bytes
// and scales exactly), the GEMV of every block type and row count against a float64
// reference on the host-quantized activations and the host decoder's weights, and the same
// results against the float activations' product within the 8-bit rounding of x.
func testGEMVQ8(t *testing.T, e *env, r *rand.Rand) {
	const k = 4096
	xv := randVals(r, GEMVMaxRows*k, 1)
	xv[5] = 0 // a unit with a zero, and a unit of zeros
	for i := 32; i < 48; i++ {
		xv[i] = 0
	}
	x, _ := e.upload(t, F32, xv)
	qh, dh := quantX8(xv)
	x8, d := e.poisoned(t, I32, len(xv)/4), e.poisoned(t, F32, len(xv)/16)
	e.do(t, func() error { return e.ops.QuantizeX8(x8, d, x, len(xv)) })
	words, scales := e.downloadI32(t, x8), e.download(t, d)
	bad := 0
	for i, q := range qh {
		if int8(uint32(words[i/4])>>(8*(i%4))) != q {
			bad++
		}
	}
	for u, s := range dh {
		if scales[u] != s {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("quantize x8: %d of %d bytes and scales differ from the host's", bad, len(qh)+len(dh))
	}
	for _, ty := range gemvqTypes {
		for _, s := range []struct{ k, m int }{{512, 37}, {4096, 20}, {2304, 9}} {
			if !fits(ty.dt, s.k) {
				continue
			}
			xs := append([]float32(nil), xv[:GEMVMaxRows*s.k]...)
			xb, _ := e.upload(t, F32, xs)
			qq, dq := quantX8(xs)
			held := make([]float32, len(xs)) // the values the quantized x stands for
			for i, q := range qq {
				held[i] = float32(q) * dq[i/16]
			}
			w, wh := e.uploadQuant(t, ty.dt, ty.qt, randVals(r, s.m*s.k, 1), s.k)
			for _, l := range []GEMVLayout{GEMVSplitX8} {
				for n := 1; n <= GEMVMaxRows; n++ {
					y := e.poisoned(t, F32, n*s.m)
					e.do(t, func() error { return e.ops.GEMVQWith(l, y, xb, w, n, s.k, s.m) })
					got := e.download(t, y)
					name := fmt.Sprintf("gemvq %s %s n=%d k=%d m=%d", l, ty.dt, n, s.k, s.m)
					check(t, name, F32, got, backendtest.MatMulRef(held[:n*s.k], wh, n, s.k, s.m))
					exact := backendtest.MatMulRef(xs[:n*s.k], wh, n, s.k, s.m)
					if err := relErr(got, exact); !(err <= 1e-2) {
						t.Errorf("%s: relative error %.3g against float activations, over 1e-2", name, err)
					} else if n == 1 {
						result(t, "kernel", name+" vs float x", fmt.Sprintf("%.2e", err), "8-bit activations, tol 1e-2 ok")
					}
				}
			}
		}
	}
}

// benchGEMVQ records the weight bandwidth of the quantized GEMV at n = 1, 5 and 8 on the
// decode shapes of an 8B model, over enough copies (at least 256 MiB) that L2 holds none.
func benchGEMVQ(t *testing.T, e *env, r *rand.Rand) {
	dv := e.dev
	for _, ty := range []struct{ dt DType }{{Q8_0}, {Q8_0R}, {Q4_K}, {Q6_K}, {Q6_KR}} {
		for _, s := range []struct{ m, k int }{{4096, 4096}, {14336, 4096}, {4096, 14336}, {1024, 4096}} {
			// Random blocks: their timing does not depend on the values (no host encoder
			// run over half a billion weights).
			raw := make([]byte, ty.dt.BytesOf(s.m*s.k))
			for i := range raw {
				raw[i] = byte(r.Uint32())
			}
			var w0 Buffer
			e.do(t, func() error {
				var err error
				if w0, err = dv.Alloc(ty.dt, s.m*s.k); err != nil {
					return err
				}
				return Upload(dv, w0, raw)
			})
			t.Cleanup(func() { dv.Do(func() error { return dv.Free(w0) }) })
			wbytes := w0.Bytes()
			copies := max(1, (256<<20+wbytes-1)/wbytes)
			x, _ := e.upload(t, F32, randVals(r, 8*s.k, 1))
			y := e.poisoned(t, F32, 8*s.m)
			e.do(t, func() error {
				ws := []Buffer{w0}
				defer func() {
					for _, w := range ws[1:] {
						dv.Free(w)
					}
				}()
				for len(ws) < copies {
					w, err := dv.Alloc(ty.dt, s.m*s.k)
					if err != nil {
						return err
					}
					ws = append(ws, w)
					if err := dv.CopyAsync(w, w0); err != nil {
						return err
					}
				}
				for _, n := range []int{1, 5, 8} {
					for _, l := range []GEMVLayout{GEMVSplit, GEMVSplitX8} {
						ms, err := timeMedian(dv, 9, func() error {
							for _, w := range ws {
								if err := e.ops.GEMVQWith(l, y, x, w, n, s.k, s.m); err != nil {
									return err
								}
							}
							return nil
						})
						if err != nil {
							return err
						}
						per := ms / float64(len(ws))
						result(t, "gemvq", fmt.Sprintf("%s n=%d m=%d k=%d %s %s", ty.dt, n, s.m, s.k, gemvqKernel(n, ty.dt), l),
							fmt.Sprintf("%.0f GB/s", float64(wbytes)/per/1e6), fmt.Sprintf("%.1f us", per*1e3))
					}
				}
				return nil
			})
		}
	}
}

// TestParseGEMVLayout: every layout's name reads back as it; an unknown one is an error
// that lists the names.
func TestParseGEMVLayout(t *testing.T) {
	for l := GEMVSplit; l <= GEMVSplitX8; l++ {
		if got, err := ParseGEMVLayout(l.String()); err != nil || got != l {
			t.Errorf("ParseGEMVLayout(%q) = %v, %v", l.String(), got, err)
		}
	}
	if _, err := ParseGEMVLayout("fast"); err == nil || !strings.Contains(err.Error(), "split8") {
		t.Errorf("an unknown layout: %v", err)
	}
}

// testX8Copies checks the producers' int8 copies. RMSNormX8 and SwiGLUX8 write their
// float32 outputs bit for bit as RMSNorm and SwiGLU do, and into o.X8 exactly the bytes and
// scales QuantizeX8 makes of those outputs; an int8 GEMV queued right after reads the copy
// (one launch fewer, the same product bit for bit as after the plain producer), and one
// queued after another launch that changed the values rounds them itself.
func testX8Copies(t *testing.T, e *env, r *rand.Rand) {
	const eps, m = 1e-5, 40
	// 4096 values a row fit the norm's registers; 9216 take its looping path.
	for _, dim := range []int{4096, 9216} {
		w, _ := e.upload(t, F32, randVals(r, dim, 1.5))
		wq, _ := e.uploadQuant(t, Q4_K, quant.Q4_K, randVals(r, m*dim, 1), dim)
		for _, rows := range []int{1, GEMVMaxRows} {
			n := rows * dim
			for _, withX := range []bool{false, true} {
				name := fmt.Sprintf("rmsnorm x8 rows=%d dim=%d residual=%v", rows, dim, withX)
				res0 := randVals(r, n, 2)
				resA, _ := e.upload(t, F32, res0)
				resB, _ := e.upload(t, F32, res0)
				var x Buffer
				if withX {
					x, _ = e.upload(t, F32, randVals(r, n, 1))
				}
				outA, outB := e.poisoned(t, F32, n), e.poisoned(t, F32, n)
				qA, dA := e.poisoned(t, I32, n/4), e.poisoned(t, F32, n/16)
				e.do(t, func() error {
					return firstErr(e.ops.RMSNorm(outA, resA, x, w, rows, dim, eps), e.ops.QuantizeX8(qA, dA, outA, n))
				})
				e.do(t, func() error { return e.ops.RMSNormX8(outB, resB, x, w, rows, dim, eps) })
				sameBits(t, name+" out", e.download(t, outA), e.download(t, outB))
				sameBits(t, name+" residual", e.download(t, resA), e.download(t, resB))
				e.sameX8(t, name, qA, dA, n)
			}
			// The GEMV after each producer: the copy used at once, not after another launch.
			name := fmt.Sprintf("gemvq x8 after rmsnorm rows=%d dim=%d", rows, dim)
			res, _ := e.upload(t, F32, randVals(r, n, 2))
			outA, outB := e.poisoned(t, F32, n), e.poisoned(t, F32, n)
			var ys [4]Buffer
			for i := range ys {
				ys[i] = e.poisoned(t, F32, rows*m)
			}
			var launches [4]uint64
			run := func(i int, fn func() error) {
				e.do(t, func() error {
					s0 := e.dev.Seq()
					err := fn()
					launches[i] = e.dev.Seq() - s0
					return err
				})
			}
			run(0, func() error {
				return firstErr(e.ops.RMSNorm(outA, res, Buffer{}, w, rows, dim, eps), e.ops.GEMVQWith(GEMVSplitX8, ys[0], outA, wq, rows, dim, m))
			})
			run(1, func() error {
				return firstErr(e.ops.RMSNormX8(outB, res, Buffer{}, w, rows, dim, eps), e.ops.GEMVQWith(GEMVSplitX8, ys[1], outB, wq, rows, dim, m))
			})
			run(2, func() error {
				return firstErr(e.ops.RMSNorm(outA, res, Buffer{}, w, rows, dim, eps), e.ops.Add(outA, outA, outA),
					e.ops.GEMVQWith(GEMVSplitX8, ys[2], outA, wq, rows, dim, m))
			})
			run(3, func() error {
				return firstErr(e.ops.RMSNormX8(outB, res, Buffer{}, w, rows, dim, eps), e.ops.Add(outB, outB, outB),
					e.ops.GEMVQWith(GEMVSplitX8, ys[3], outB, wq, rows, dim, m))
			})
			// Two GEMVs of one x in a row: the second reads the first one's rounding.
			var twice uint64
			y1, y2 := e.poisoned(t, F32, rows*m), e.poisoned(t, F32, rows*m)
			e.do(t, func() error {
				s0 := e.dev.Seq()
				err := firstErr(e.ops.RMSNorm(outA, res, Buffer{}, w, rows, dim, eps),
					e.ops.GEMVQWith(GEMVSplitX8, y1, outA, wq, rows, dim, m), e.ops.GEMVQWith(GEMVSplitX8, y2, outA, wq, rows, dim, m))
				twice = e.dev.Seq() - s0
				return err
			})
			if twice != 4 {
				t.Errorf("%s: %d launches for a norm and two GEMVs of its output, want 4 (one rounding)", name, twice)
			}
			sameBits(t, name+" first GEMV of one x", e.download(t, ys[0]), e.download(t, y1))
			sameBits(t, name+" second GEMV of one x", e.download(t, ys[0]), e.download(t, y2))
			if launches != [4]uint64{3, 2, 4, 4} {
				t.Errorf("%s: launches %v, want [3 2 4 4] (the copy read at once, rounded again after another launch)", name, launches)
			}
			sameBits(t, name, e.download(t, ys[0]), e.download(t, ys[1]))
			sameBits(t, name+" after another launch", e.download(t, ys[2]), e.download(t, ys[3]))
		}
	}
	// SwiGLU: out a separate buffer, and out = gate (as MatMulSwiGLU runs it).
	for _, rows := range []int{1, GEMVMaxRows} {
		const dim = 14336
		n := rows * dim
		gv, uv := randVals(r, n, 3), randVals(r, n, 1)
		g, _ := e.upload(t, F32, gv)
		u, _ := e.upload(t, F32, uv)
		outA := e.poisoned(t, F32, n)
		qA, dA := e.poisoned(t, I32, n/4), e.poisoned(t, F32, n/16)
		e.do(t, func() error {
			return firstErr(e.ops.SwiGLU(outA, g, u, rows, dim, dim), e.ops.QuantizeX8(qA, dA, outA, n))
		})
		want := e.download(t, outA)
		outB := e.poisoned(t, F32, n)
		e.do(t, func() error { return e.ops.SwiGLUX8(outB, g, u, n) })
		name := fmt.Sprintf("swiglu x8 rows=%d dim=%d", rows, dim)
		sameBits(t, name, want, e.download(t, outB))
		e.sameX8(t, name, qA, dA, n)
		gB, _ := e.upload(t, F32, gv)
		e.do(t, func() error { return e.ops.SwiGLUX8(gB, gB, u, n) })
		sameBits(t, name+" in place", want, e.download(t, gB))
		e.sameX8(t, name+" in place", qA, dA, n)
	}
}

// sameX8 fails unless o.X8 holds the n values' bytes in q and scales in d (QuantizeX8's).
func (e *env) sameX8(t *testing.T, name string, q, d Buffer, n int) {
	t.Helper()
	wantQ, gotQ := e.downloadI32(t, q), e.downloadI32(t, Buffer{Ptr: e.ops.X8.Q.Ptr, DType: I32, Len: n / 4})
	wantD, gotD := e.download(t, d), e.download(t, Buffer{Ptr: e.ops.X8.D.Ptr, DType: F32, Len: n / 16})
	bad := 0
	for i := range wantQ {
		if gotQ[i] != wantQ[i] {
			bad++
		}
	}
	for i := range wantD {
		if math.Float32bits(gotD[i]) != math.Float32bits(wantD[i]) {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d x8 words and scales differ from QuantizeX8's", name, bad, len(wantQ)+len(wantD))
	} else {
		result(t, "kernel", name, "bit for bit", "x8 copy = QuantizeX8 of the output")
	}
}

// sameBits fails unless got equals want bit for bit.
func sameBits(t *testing.T, name string, want, got []float32) {
	t.Helper()
	bad := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 3 {
				t.Errorf("%s: value %d is %g, want %g", name, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 || len(got) != len(want) {
		t.Errorf("%s: %d of %d values differ (lengths %d, %d)", name, bad, len(want), len(got), len(want))
	}
}
