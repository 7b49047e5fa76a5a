package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Value distributions the random generators draw from.
const (
	modeRandom  = iota // typical values
	modeExtreme        // quants at their extremes, large scales
	modeUnit           // random quants, all scales 1: integer sums must match exactly
	modeZero           // all zero
	numModes
)

// halfBits returns the f16 bits of v.
func halfBits(v float32) uint16 { return quant.F32ToF16(v) }

// randScale returns a scale for a block under mode.
func randScale(r *rand.Rand, mode int) float32 {
	switch mode {
	case modeExtreme:
		if r.Intn(2) == 0 {
			return -60000
		}
		return 60000
	case modeUnit:
		return 1
	case modeZero:
		return 0
	}
	return (r.Float32()*2 - 1) * 0.05
}

// randQuantBytes fills b with random bytes, or extremes (0x00, 0x7f, 0x80, 0xff), or zeros.
func randQuantBytes(r *rand.Rand, b []byte, mode int) {
	for i := range b {
		switch mode {
		case modeExtreme:
			b[i] = []byte{0x00, 0x7f, 0x80, 0xff}[r.Intn(4)]
		case modeZero:
			b[i] = 0
		default:
			b[i] = byte(r.Intn(256))
		}
	}
}

// randWeights returns nb random blocks of weight type t.
func randWeights(r *rand.Rand, t quant.Type, nb, mode int) []byte {
	w := make([]byte, nb*t.BlockBytes())
	randQuantBytes(r, w, mode)
	for i := range nb {
		b := w[i*t.BlockBytes() : (i+1)*t.BlockBytes()]
		switch t {
		case quant.Q8_0, quant.Q4_0, quant.Q5_0:
			binary.LittleEndian.PutUint16(b, halfBits(randScale(r, mode)))
		case quant.Q4_K, quant.Q5_K, quant.Q5_1, quant.Q4_1:
			binary.LittleEndian.PutUint16(b, halfBits(randScale(r, mode)))
			binary.LittleEndian.PutUint16(b[2:], halfBits(randScale(r, mode)))
		case quant.Q6_K:
			binary.LittleEndian.PutUint16(b[208:], halfBits(randScale(r, mode)))
		}
	}
	return w
}

// randActivations returns nb random activation blocks of type t (Q8_0 or Q8_K) with quants
// in [-127, 127] and consistent bsums.
func randActivations(r *rand.Rand, t quant.Type, nb, mode int) []byte {
	x := make([]byte, nb*t.BlockBytes())
	for i := range nb {
		b := x[i*t.BlockBytes() : (i+1)*t.BlockBytes()]
		var qs []byte
		if t == quant.Q8_0 {
			binary.LittleEndian.PutUint16(b, halfBits(randScale(r, mode)))
			qs = b[2:]
		} else {
			binary.LittleEndian.PutUint32(b, math.Float32bits(randScale(r, mode)))
			qs = b[4:260]
		}
		for j := range qs {
			switch mode {
			case modeExtreme:
				qs[j] = byte(int8([]int{-127, 127}[r.Intn(2)]))
			case modeZero:
				qs[j] = 0
			default:
				qs[j] = byte(int8(r.Intn(255) - 127))
			}
		}
		if t == quant.Q8_K {
			for k := range 16 {
				s := 0
				for _, q := range qs[16*k : 16*k+16] {
					s += int(int8(q))
				}
				binary.LittleEndian.PutUint16(b[260+2*k:], uint16(int16(s)))
			}
		}
	}
	return x
}

// oracleDot dequantizes both operands with package quant and returns their float64 dot
// product and the sum of absolute products (the scale for tolerances).
func oracleDot(t *testing.T, wt, xt quant.Type, w, x []byte, n int) (dot, mag float64) {
	t.Helper()
	wf := make([]float32, n)
	xf := make([]float32, n)
	if err := quant.Dequantize(wt, w, wf); err != nil {
		t.Fatal(err)
	}
	if err := quant.Dequantize(xt, x, xf); err != nil {
		t.Fatal(err)
	}
	for i := range wf {
		p := float64(wf[i]) * float64(xf[i])
		dot += p
		mag += math.Abs(p)
	}
	return dot, mag
}

// quantCase names one quantized dot kernel with its formats.
type quantCase struct {
	name   string
	wt, xt quant.Type
	kernel func(k *kernels) func(w, x []byte, nb int) float32
}

var quantCases = []quantCase{
	{"Q8_0", quant.Q8_0, quant.Q8_0, func(k *kernels) func(w, x []byte, nb int) float32 { return oneRow(k.rows8Q8_0) }},
	{"Q4_0", quant.Q4_0, quant.Q8_0, func(k *kernels) func(w, x []byte, nb int) float32 { return oneRow(k.rows8Q4_0) }},
	{"Q4_K", quant.Q4_K, quant.Q8_K, func(k *kernels) func(w, x []byte, nb int) float32 { return k.dotQ4K }},
	{"Q6_K", quant.Q6_K, quant.Q8_K, func(k *kernels) func(w, x []byte, nb int) float32 { return k.dotQ6K }},
	{"Q5_0", quant.Q5_0, quant.Q8_0, func(k *kernels) func(w, x []byte, nb int) float32 { return k.dotQ5_0 }},
	{"Q5_K", quant.Q5_K, quant.Q8_K, func(k *kernels) func(w, x []byte, nb int) float32 { return k.dotQ5K }},
	{"Q5_1", quant.Q5_1, quant.Q8_0, func(k *kernels) func(w, x []byte, nb int) float32 { return k.dotQ5_1 }},
	{"Q4_1", quant.Q4_1, quant.Q8_0, func(k *kernels) func(w, x []byte, nb int) float32 { return k.dotQ4_1 }},
}

// bitTwin names, for a SIMD kernel set, the set whose results it reproduces bit for bit
// (the avx512 set replaces avx2 kernels by ones with the same lanes and float steps).
var bitTwin = map[string]string{"avx512": "avx2"}

// checkBitTwins fails when a kernel set's result differs in any bit from its bitTwin's
// (both among got, by set name).
func checkBitTwins(t *testing.T, what string, got map[string]float32) {
	t.Helper()
	for name, twin := range bitTwin {
		a, ok := got[name]
		b, ok2 := got[twin]
		if ok && ok2 && !sameBits(a, b) {
			t.Fatalf("%s: %s gives %v (%#x), %s %v (%#x): must be equal bit for bit", what, name, a, math.Float32bits(a), twin, b, math.Float32bits(b))
		}
	}
}

// checkQuantDot runs one random case of c through every kernel set and compares each with
// the generic twin (exactly under modeUnit), the generic twin with the quant oracle, and
// each set with its bitTwin (exactly).
func checkQuantDot(t *testing.T, c quantCase, seed int64, nb, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	w := randWeights(r, c.wt, nb, mode)
	x := randActivations(r, c.xt, nb, mode)
	n := nb * c.wt.BlockSize()
	want, mag := oracleDot(t, c.wt, c.xt, w, x, n)
	if math.IsInf(mag, 0) || math.IsNaN(mag) {
		t.Skip("non-finite operands")
	}
	ref := c.kernel(genericKernels())(w, x, nb)
	tol := 1e-5*mag + 1e-30
	if d := math.Abs(float64(ref) - want); d > tol {
		t.Fatalf("%s generic nb=%d mode=%d: got %g, oracle %g (diff %g > %g)", c.name, nb, mode, ref, want, d, tol)
	}
	results := map[string]float32{}
	defer func() { checkBitTwins(t, fmt.Sprintf("%s nb=%d mode=%d", c.name, nb, mode), results) }()
	for _, k := range allKernels() {
		got := c.kernel(k)(w, x, nb)
		results[k.name] = got
		if mode == modeUnit && mag < 1<<24 {
			if got != ref {
				t.Fatalf("%s %s nb=%d unit scales: got %v, generic %v (must be exact)", c.name, k.name, nb, got, ref)
			}
			continue
		}
		if d := math.Abs(float64(got) - float64(ref)); d > tol {
			t.Fatalf("%s %s nb=%d mode=%d: got %g, generic %g (diff %g > %g)", c.name, k.name, nb, mode, got, ref, d, tol)
		}
	}
}

func TestQuantDots(t *testing.T) {
	for _, c := range quantCases {
		t.Run(c.name, func(t *testing.T) {
			for _, nb := range []int{1, 2, 3, 5, 8, 17, 64} {
				for mode := range numModes {
					checkQuantDot(t, c, int64(nb*10+mode), nb, mode)
				}
			}
		})
	}
}

func fuzzQuantDot(f *testing.F, c quantCase) {
	f.Add(int64(1), uint8(1), uint8(modeRandom))
	f.Add(int64(2), uint8(3), uint8(modeExtreme))
	f.Add(int64(3), uint8(7), uint8(modeUnit))
	f.Add(int64(4), uint8(2), uint8(modeZero))
	f.Add(int64(5), uint8(40), uint8(modeRandom))
	f.Fuzz(func(t *testing.T, seed int64, nb, mode uint8) {
		checkQuantDot(t, c, seed, int(nb%80)+1, int(mode%numModes))
	})
}

func FuzzDotQ8_0(f *testing.F) { fuzzQuantDot(f, quantCases[0]) }
func FuzzDotQ4_0(f *testing.F) { fuzzQuantDot(f, quantCases[1]) }
func FuzzDotQ4K(f *testing.F)  { fuzzQuantDot(f, quantCases[2]) }
func FuzzDotQ6K(f *testing.F)  { fuzzQuantDot(f, quantCases[3]) }
func FuzzDotQ5_0(f *testing.F) { fuzzQuantDot(f, quantCases[4]) }
func FuzzDotQ5K(f *testing.F)  { fuzzQuantDot(f, quantCases[5]) }
func FuzzDotQ5_1(f *testing.F) { fuzzQuantDot(f, quantCases[6]) }
func FuzzDotQ4_1(f *testing.F) { fuzzQuantDot(f, quantCases[7]) }

// floatCase names one float dot kernel; enc encodes float32 weights in its format.
type floatCase struct {
	name string
	wt   quant.Type
	dot  func(k *kernels, w []byte, x []float32) float32
}

var floatCases = []floatCase{
	{"F32", quant.F32, func(k *kernels, w []byte, x []float32) float32 { return k.dotF32(bytesAsF32(w), x) }},
	{"F16", quant.F16, func(k *kernels, w []byte, x []float32) float32 { return k.dotF16(w, x) }},
	{"BF16", quant.BF16, func(k *kernels, w []byte, x []float32) float32 { return k.dotBF16(w, x) }},
}

// randFloats returns n values under mode.
func randFloats(r *rand.Rand, n, mode int) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch mode {
		case modeExtreme:
			v[i] = []float32{-60000, 60000, 1e-7, -1e-7}[r.Intn(4)]
		case modeZero:
		case modeUnit:
			v[i] = float32(r.Intn(9) - 4)
		default:
			v[i] = float32(r.NormFloat64())
		}
	}
	return v
}

func checkFloatDot(t *testing.T, c floatCase, seed int64, n, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	wf := randFloats(r, n, mode)
	x := randFloats(r, n, mode)
	w := make([]byte, n*c.wt.BlockBytes())
	if err := quant.Quantize(c.wt, wf, w); err != nil {
		t.Fatal(err)
	}
	want, mag := oracleDot(t, c.wt, quant.F32, w, f32Bytes(x), n)
	tol := 1e-5*mag + 1e-30
	ref := c.dot(genericKernels(), w, x)
	if d := math.Abs(float64(ref) - want); d > tol {
		t.Fatalf("%s generic n=%d: got %g, oracle %g (diff %g > %g)", c.name, n, ref, want, d, tol)
	}
	results := map[string]float32{}
	for _, k := range allKernels() {
		got := c.dot(k, w, x)
		results[k.name] = got
		if d := math.Abs(float64(got) - float64(ref)); d > tol {
			t.Fatalf("%s %s n=%d mode=%d: got %g, generic %g (diff %g > %g)", c.name, k.name, n, mode, got, ref, d, tol)
		}
	}
	checkBitTwins(t, fmt.Sprintf("%s n=%d mode=%d", c.name, n, mode), results)
}

func TestFloatDots(t *testing.T) {
	for _, c := range floatCases {
		t.Run(c.name, func(t *testing.T) {
			for _, n := range []int{1, 7, 8, 9, 31, 32, 33, 100, 2048} {
				for mode := range numModes {
					checkFloatDot(t, c, int64(n*10+mode), n, mode)
				}
			}
		})
	}
}

func fuzzFloatDot(f *testing.F, c floatCase) {
	f.Add(int64(1), uint16(1), uint8(modeRandom))
	f.Add(int64(2), uint16(33), uint8(modeExtreme))
	f.Add(int64(3), uint16(256), uint8(modeUnit))
	f.Add(int64(4), uint16(8), uint8(modeZero))
	f.Fuzz(func(t *testing.T, seed int64, n uint16, mode uint8) {
		checkFloatDot(t, c, seed, int(n%4096)+1, int(mode%numModes))
	})
}

func FuzzDotF32(f *testing.F)  { fuzzFloatDot(f, floatCases[0]) }
func FuzzDotF16(f *testing.F)  { fuzzFloatDot(f, floatCases[1]) }
func FuzzDotBF16(f *testing.F) { fuzzFloatDot(f, floatCases[2]) }

func TestAxpy(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	for _, n := range []int{1, 8, 13, 64, 1000} {
		x := randFloats(r, n, modeRandom)
		y0 := randFloats(r, n, modeRandom)
		want := append([]float32(nil), y0...)
		genericKernels().axpy(want, 0.37, x)
		for _, k := range allKernels() {
			y := append([]float32(nil), y0...)
			k.axpy(y, 0.37, x)
			for i := range y {
				if math.Abs(float64(y[i]-want[i])) > 1e-6*(1+math.Abs(float64(want[i]))) {
					t.Fatalf("%s n=%d: y[%d]=%g want %g", k.name, n, i, y[i], want[i])
				}
			}
		}
	}
}

func TestKernelSets(t *testing.T) {
	names := KernelSets()
	if names[len(names)-1] != genericName {
		t.Fatalf("last kernel set %q, want generic", names[len(names)-1])
	}
	t.Setenv("KVASIR_CPU", "generic")
	p := testPool(2)
	defer p.Close()
	if p.KernelSet() != genericName {
		t.Fatalf("KVASIR_CPU=generic gave %q", p.KernelSet())
	}
	if _, err := NewPoolKernels(1, "no-such-set"); err == nil {
		t.Fatal("unknown kernel set accepted")
	}
	t.Logf("kernel sets: %v", names)
}

// TestKernelSetCoverage says which SIMD kernel sets the differential tests ran (every test
// that compares kernels loops over allKernels): one subtest per set of this architecture,
// passing when the CPU has the set and skipped, with the features it lacks, when not. A set
// named in KVASIR_REQUIRE_CPU (comma-separated, e.g. "avx512") fails instead of skipping,
// for machines that must test it. scripts/test.sh prints this test's lines.
func TestKernelSetCoverage(t *testing.T) {
	required := strings.Split(os.Getenv("KVASIR_REQUIRE_CPU"), ",")
	have := KernelSets()
	for _, s := range platformSets() {
		t.Run(s.name, func(t *testing.T) {
			if slices.Contains(have, s.name) {
				if _, err := kernelsByName(s.name); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s kernels compared with generic by the differential tests", s.name)
				return
			}
			_, err := kernelsByName(s.name)
			if err == nil || !strings.Contains(err.Error(), s.needs) {
				t.Fatalf("kernel set %s missing, but kernelsByName says %v", s.name, err)
			}
			if slices.Contains(required, s.name) {
				t.Fatalf("KVASIR_REQUIRE_CPU names %s: %v", s.name, err)
			}
			t.Skipf("%s kernels NOT tested: %v", s.name, err)
		})
	}
}
