package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// supportedTypes lists every type Quantize and Dequantize handle.
var supportedTypes = []Type{F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K}

// legacyTypes are the block types whose round-to-nearest quantizers are projections.
var legacyTypes = []Type{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1}

// dataKind generates one block of test data.
type dataKind struct {
	name string
	gen  func(r *rand.Rand, x []float32)
}

var dataKinds = []dataKind{
	{"gaussian", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
	}},
	{"uniform", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(r.Float64()*2 - 1)
		}
	}},
	{"outliers", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(r.NormFloat64())
			if r.IntN(40) == 0 {
				x[i] *= 80
			}
		}
	}},
	{"sparse", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = 0
			if r.IntN(8) == 0 {
				x[i] = float32(r.NormFloat64())
			}
		}
	}},
	{"heavy tail", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(max(-1000, min(1000, math.Tan(math.Pi*(r.Float64()-0.5)))))
		}
	}},
	{"bimodal", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(r.NormFloat64()*0.05 + float64(2*r.IntN(2)-1))
		}
	}},
	{"mixed scales", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Pow(10, float64(i/16%4-2)))
		}
	}},
	{"positive offset", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(3 + r.Float64())
		}
	}},
	{"negative offset", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(-3 - r.Float64())
		}
	}},
	{"tiny", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(r.NormFloat64() * 1e-6)
		}
	}},
	{"large", func(r *rand.Rand, x []float32) {
		for i := range x {
			x[i] = float32(r.NormFloat64() * 300)
		}
	}},
	{"all zero", func(r *rand.Rand, x []float32) { clear(x) }},
	{"constant", func(r *rand.Rand, x []float32) {
		c := float32(r.NormFloat64() * 5)
		for i := range x {
			x[i] = c
		}
	}},
	{"single spike", func(r *rand.Rand, x []float32) {
		clear(x)
		x[r.IntN(len(x))] = float32(r.NormFloat64() * 10)
	}},
}

// roundTrip quantizes x to typ and back.
func roundTrip(t *testing.T, typ Type, x []float32) ([]byte, []float32) {
	t.Helper()
	n, err := typ.RowBytes(len(x))
	if err != nil {
		t.Fatal(err)
	}
	q := make([]byte, n)
	if err := Quantize(typ, x, q); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(x))
	if err := Dequantize(typ, q, y); err != nil {
		t.Fatal(err)
	}
	return q, y
}

// TestRoundTripWithinBound checks, block by block, that every quantizer's round trip stays
// within ErrorBound on many kinds of data.
func TestRoundTripWithinBound(t *testing.T) {
	const elems = 48 * 256 // per data kind and type
	for _, typ := range supportedTypes {
		t.Run(typ.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(typ), 42))
			bs := typ.BlockSize()
			if bs == 1 {
				bs = 32 // judge plain types over small groups
			}
			for _, kind := range dataKinds {
				x := make([]float32, elems)
				for i := 0; i < elems; i += bs {
					kind.gen(r, x[i:i+bs])
				}
				_, y := roundTrip(t, typ, x)
				for i := 0; i < elems; i += bs {
					bound, err := ErrorBound(typ, x[i:i+bs])
					if err != nil {
						t.Fatal(err)
					}
					for j := i; j < i+bs; j++ {
						if e := math.Abs(float64(x[j]) - float64(y[j])); !(e <= bound) {
							t.Fatalf("%s: element %d: %g decodes as %g, error %g above the bound %g",
								kind.name, j, x[j], y[j], e, bound)
						}
					}
				}
			}
		})
	}
}

// TestRoundTripRMSE guards the quality of the quantizers on gaussian data: a broken scale
// search that still met the worst-case bounds would show here. Limits are about 1.1x the
// measured values.
func TestRoundTripRMSE(t *testing.T) {
	limits := map[Type]float64{ // RMSE relative to each block's largest magnitude
		F16: 2e-4, BF16: 1.5e-3, Q4_0: 0.040, Q4_1: 0.037, Q5_0: 0.020, Q5_1: 0.018,
		Q8_0: 0.0025, Q8_1: 0.0025, Q2_K: 0.109, Q3_K: 0.056, Q4_K: 0.026, Q5_K: 0.0133,
		Q6_K: 0.0065, Q8_K: 0.0025,
	}
	r := rand.New(rand.NewPCG(9, 9))
	x := make([]float32, 64*256)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for typ, limit := range limits {
		_, y := roundTrip(t, typ, x)
		var sum float64
		for b := 0; b < len(x); b += 256 {
			_, amax := absMax(x[b : b+256])
			for i := b; i < b+256; i++ {
				e := float64(x[i]-y[i]) / float64(amax)
				sum += e * e
			}
		}
		rmse := math.Sqrt(sum / float64(len(x)))
		if rmse > limit {
			t.Errorf("%s: relative RMSE %.5f above %.5f", typ, rmse, limit)
		}
		t.Logf("%s: relative RMSE %.5f", typ, rmse)
	}
}

// TestLegacyStable checks that re-quantizing dequantized data changes nothing: for the
// round-to-nearest types, quantize∘dequantize is a projection.
func TestLegacyStable(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, typ := range legacyTypes {
		for _, kind := range dataKinds {
			if kind.name == "tiny" {
				continue // f16 scales underflow: not a fixed point by design
			}
			x := make([]float32, 4*256)
			for i := 0; i < len(x); i += typ.BlockSize() {
				kind.gen(r, x[i:i+typ.BlockSize()])
			}
			_, y1 := roundTrip(t, typ, x)
			_, y2 := roundTrip(t, typ, y1)
			for i := range y1 {
				if math.Float32bits(y1[i]) != math.Float32bits(y2[i]) {
					t.Fatalf("%s %s: element %d: %g re-quantizes to %g", typ, kind.name, i, y1[i], y2[i])
				}
			}
		}
	}
	// Q8_K keeps an f32 scale computed as 1/(-127/max), which may move by an ulp, but its
	// quants (and so its block sums) must not change.
	for _, kind := range dataKinds {
		x := make([]float32, 4*256)
		for i := 0; i < len(x); i += 256 {
			kind.gen(r, x[i:i+256])
		}
		q1, y1 := roundTrip(t, Q8_K, x)
		q2, _ := roundTrip(t, Q8_K, y1)
		for b := 0; b < len(q1); b += 292 {
			if string(q1[b+4:b+292]) != string(q2[b+4:b+292]) {
				t.Fatalf("Q8_K %s: block %d: quants changed on re-quantization", kind.name, b/292)
			}
		}
	}
}

func TestAllZeroBlocksEncodeAsZero(t *testing.T) {
	for _, typ := range supportedTypes {
		x := make([]float32, 256)
		_, y := roundTrip(t, typ, x)
		for i, v := range y {
			if v != 0 {
				t.Fatalf("%s: element %d of an all-zero block decodes as %g", typ, i, v)
			}
		}
	}
}

// Quantizer outputs worked out by hand from GGML's reference algorithms.
func TestQuantizeHandComputed(t *testing.T) {
	t.Run("Q4_0", func(t *testing.T) {
		var x [32]float32
		for j := range x {
			x[j] = float32(j - 16) // max magnitude -16: d = -16/-8 = 2, q = trunc(x/2 + 8.5)
		}
		q, y := roundTrip(t, Q4_0, x[:])
		if d := getF16(q); d != 2 {
			t.Fatalf("d = %g, want 2", d)
		}
		for j := range x {
			want := float32((min(15, (j+1)/2) - 8) * 2) // trunc(j/2 - 8 + 8.5) = (j+1)/2
			if y[j] != want {
				t.Errorf("element %d: %g, want %g", j, y[j], want)
			}
		}
	})
	t.Run("Q8_0", func(t *testing.T) {
		var x [32]float32
		for j := range x {
			x[j] = float32(j) // amax 31: q = round(j*127/31)
		}
		q, _ := roundTrip(t, Q8_0, x[:])
		for j := range x {
			want := int8(math.Round(float64(float32(j) * (1 / (float32(31) / 127)))))
			if got := int8(q[2+j]); got != want {
				t.Errorf("q[%d] = %d, want %d", j, got, want)
			}
		}
		if got := int8(q[2+31]); got != 127 {
			t.Errorf("q[31] = %d, want 127", got)
		}
		if got := int8(q[2+16]); got != 66 { // 16*127/31 = 65.55
			t.Errorf("q[16] = %d, want 66", got)
		}
	})
	t.Run("Q4_1", func(t *testing.T) {
		var x [32]float32
		for j := range x {
			x[j] = 1 + float32(j%16)*0.5 // min 1, max 8.5: d = 0.5, exact
		}
		q, y := roundTrip(t, Q4_1, x[:])
		if d, m := getF16(q), getF16(q[2:]); d != 0.5 || m != 1 {
			t.Fatalf("d, m = %g, %g; want 0.5, 1", d, m)
		}
		for j := range x {
			if y[j] != x[j] {
				t.Errorf("element %d: %g, want %g", j, y[j], x[j])
			}
		}
		if q[4+3] != 0x33 {
			t.Errorf("qs[3] = %#x, want 0x33", q[4+3])
		}
	})
	t.Run("Q8_1 sum", func(t *testing.T) {
		var x [32]float32
		for j := range x {
			x[j] = float32(j%5) - 1.5
		}
		var b [36]byte
		QuantizeBlockQ8_1(&x, &b)
		sum := 0
		for _, c := range b[4:] {
			sum += int(int8(c))
		}
		d := float32(2.5) / 127
		if got, want := getF16(b[2:]), F16ToF32(F32ToF16(float32(sum)*d)); got != want {
			t.Errorf("s = %g, want %g (sum %d)", got, want, sum)
		}
	})
	t.Run("Q8_K bsums", func(t *testing.T) {
		var x [256]float32
		r := rand.New(rand.NewPCG(2, 3))
		for j := range x {
			x[j] = float32(r.NormFloat64())
		}
		var b [292]byte
		QuantizeBlockQ8_K(&x, &b)
		for k := range 16 {
			sum := 0
			for _, c := range b[4+16*k : 20+16*k] {
				sum += int(int8(c))
			}
			if got := int16(binary.LittleEndian.Uint16(b[260+2*k:])); int(got) != sum {
				t.Errorf("bsums[%d] = %d, want %d", k, got, sum)
			}
		}
		_, amax := absMax(x[:])
		d := math.Float32frombits(binary.LittleEndian.Uint32(b[0:]))
		if math.Abs(float64(d)*127-float64(amax)) > 1e-5 {
			t.Errorf("d = %g, want %g/127", d, amax)
		}
	})
}

func TestBlockBytesAgree(t *testing.T) {
	want := map[Type][2]int{
		Q4_0: {32, 18}, Q4_1: {32, 20}, Q5_0: {32, 22}, Q5_1: {32, 24}, Q8_0: {32, 34}, Q8_1: {32, 36},
		Q2_K: {256, 84}, Q3_K: {256, 110}, Q4_K: {256, 144}, Q5_K: {256, 176}, Q6_K: {256, 210},
		Q8_K: {256, 292}, F32: {1, 4}, F16: {1, 2}, BF16: {1, 2},
	}
	for typ, w := range want {
		if typ.BlockSize() != w[0] || typ.BlockBytes() != w[1] {
			t.Errorf("%s: block %d elements / %d bytes, want %d / %d", typ, typ.BlockSize(), typ.BlockBytes(), w[0], w[1])
		}
	}
	for _, typ := range supportedTypes {
		if !Supported(typ) {
			t.Errorf("Supported(%s) = false", typ)
		}
	}
	for _, typ := range []Type{IQ2_XXS, IQ4_NL, I8, F64, Type(99)} {
		if Supported(typ) {
			t.Errorf("Supported(%s) = true", typ)
		}
	}
}

func TestSizeErrors(t *testing.T) {
	tests := []struct {
		name    string
		typ     Type
		nsrc    int // bytes (dequantize) or elements (quantize)
		ndst    int
		quant   bool
		wantSub []string
	}{
		{"dequantize short src", Q4_K, 143, 256, false, []string{"Q4_K", "256 elements", "144 bytes", "got 143"}},
		{"dequantize long src", Q8_0, 35, 32, false, []string{"Q8_0", "34 bytes", "got 35"}},
		{"dequantize partial block", Q4_0, 18, 31, false, []string{"Q4_0", "31 elements", "block size 32"}},
		{"dequantize unknown", Type(99), 4, 1, false, []string{"unknown", "99"}},
		{"dequantize unsupported", IQ2_XS, 74, 256, false, []string{"IQ2_XS", "not supported"}},
		{"quantize wrong dst", Q6_K, 256, 209, true, []string{"Q6_K", "210 bytes", "got 209"}},
		{"quantize partial block", Q2_K, 255, 84, true, []string{"Q2_K", "255 elements"}},
		{"quantize unsupported", IQ4_NL, 32, 18, true, []string{"IQ4_NL", "not supported"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.quant {
				err = Quantize(tc.typ, make([]float32, tc.nsrc), make([]byte, tc.ndst))
			} else {
				err = Dequantize(tc.typ, make([]byte, tc.nsrc), make([]float32, tc.ndst))
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range tc.wantSub {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	if _, err := ErrorBound(Q4_K, make([]float32, 100)); err == nil {
		t.Error("ErrorBound accepted a partial block")
	}
	if _, err := ErrorBound(IQ1_S, make([]float32, 256)); err == nil {
		t.Error("ErrorBound accepted an unsupported type")
	}
	if _, err := MaxError(Q4_0, make([]float32, 33)); err == nil {
		t.Error("MaxError accepted a partial block")
	}
}

func TestMaxErrorAndBound(t *testing.T) {
	x := make([]float32, 256)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, typ := range supportedTypes {
		e, err := MaxError(typ, x)
		if err != nil {
			t.Fatal(err)
		}
		bound, err := ErrorBound(typ, x)
		if err != nil {
			t.Fatal(err)
		}
		if !(e <= bound) || (typ != F32 && e == 0) {
			t.Errorf("%s: MaxError %g, bound %g", typ, e, bound)
		}
	}
	// Non-finite input and f16 overflow have no finite bound.
	x[3] = float32(math.NaN())
	if b, _ := ErrorBound(Q8_0, x); !math.IsInf(b, 1) {
		t.Errorf("bound with NaN input = %g, want +Inf", b)
	}
	x[3] = 1e6
	if b, _ := ErrorBound(F16, x); !math.IsInf(b, 1) {
		t.Errorf("F16 bound beyond the f16 range = %g, want +Inf", b)
	}
	if b, _ := ErrorBound(Q8_K, x); math.IsInf(b, 1) {
		t.Errorf("Q8_K (f32 scale) bound = %g, want finite", b)
	}
}
