package cpu

import (
	"bytes"
	"math"
	"math/rand"
	"reflect"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// checkQuantQ8_0 requires every kernel set's Q8_0 activation quantizer to produce the bytes
// of quant.QuantizeBlockQ8_0, on values drawn under mode plus injected ties, NaNs and
// infinities.
func checkQuantQ8_0(t *testing.T, seed int64, nb, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	src := randFloats(r, 32*nb, mode)
	for i := range src {
		switch r.Intn(40) {
		case 0:
			src[i] = float32(r.Intn(255)-127) / 2 // ties once scaled by 1 (amax 63.5 or more)
		case 1:
			src[i] = float32(math.NaN())
		case 2:
			src[i] = float32(math.Inf(1 - 2*r.Intn(2)))
		case 3:
			src[i] = 127
		}
	}
	want := make([]byte, nb*q8_0Bytes)
	quantQ8_0Generic(want, src)
	for _, k := range allKernels() {
		got := make([]byte, nb*q8_0Bytes)
		k.quantQ8_0(got, src)
		if !bytes.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					b := i / q8_0Bytes
					t.Fatalf("%s nb=%d mode=%d: byte %d (block %d) = %d, want %d; block %v", k.name, nb, mode, i, b, int8(got[i]), int8(want[i]), src[32*b:32*b+32])
				}
			}
		}
	}
}

func TestQuantQ8_0(t *testing.T) {
	for _, nb := range []int{1, 2, 7, 64} {
		for mode := range numModes {
			checkQuantQ8_0(t, int64(nb*10+mode), nb, mode)
		}
	}
}

func FuzzQuantQ8_0(f *testing.F) {
	f.Add(int64(1), uint8(1), uint8(modeRandom))
	f.Add(int64(2), uint8(9), uint8(modeExtreme))
	f.Fuzz(func(t *testing.T, seed int64, nb, mode uint8) {
		checkQuantQ8_0(t, seed, int(nb%64)+1, int(mode%numModes))
	})
}

// TestKernelSetsComplete requires every kernel of every set to be present.
func TestKernelSetsComplete(t *testing.T) {
	for _, k := range allKernels() {
		v := reflect.ValueOf(*k)
		for i := range v.NumField() {
			if f := v.Field(i); f.Kind() == reflect.Func && f.IsNil() {
				t.Errorf("kernel set %s: %s is missing", k.name, v.Type().Field(i).Name)
			}
		}
	}
}

// checkDequant requires every kernel set's dequantizers to match quant.Dequantize
// bit for bit (NaN matches NaN).
func checkDequant(t *testing.T, seed int64, nb, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	for _, c := range quantCases {
		src := randWeights(r, c.wt, nb, mode)
		want := make([]float32, c.wt.BlockSize()*nb)
		if err := quant.Dequantize(c.wt, src, want); err != nil {
			t.Fatal(err)
		}
		for _, k := range allKernels() {
			got := make([]float32, len(want))
			switch c.wt {
			case quant.Q8_0, quant.Q4_0:
				continue // multiplied in their block format, never widened
			case quant.Q5_0:
				k.dequantQ5_0(got, src)
			case quant.Q5_1:
				k.dequantQ5_1(got, src)
			case quant.Q4_1:
				k.dequantQ4_1(got, src)
			case quant.Q5_K:
				k.dequantQ5K(got, src)
			case quant.Q4_K:
				k.dequantQ4K(got, src)
			default:
				k.dequantQ6K(got, src)
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("%s %s nb=%d: [%d] = %g, want %g", c.name, k.name, nb, i, got[i], want[i])
				}
			}
		}
	}
}

func TestDequant(t *testing.T) {
	for _, nb := range []int{1, 3, 16} {
		for mode := range numModes {
			checkDequant(t, int64(nb*10+mode), nb, mode)
		}
	}
}

func FuzzDequant(f *testing.F) {
	f.Add(int64(1), uint8(1), uint8(modeRandom))
	f.Add(int64(2), uint8(7), uint8(modeExtreme))
	f.Fuzz(func(t *testing.T, seed int64, nb, mode uint8) {
		checkDequant(t, seed, int(nb%64)+1, int(mode%numModes))
	})
}

// checkQuantQ8_K requires quantQ8_KFast and every kernel set's Q8_K quantizer to produce the
// bytes of quant.QuantizeBlockQ8_K.
func checkQuantQ8_K(t *testing.T, seed int64, nb, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	src := randFloats(r, 256*nb, mode)
	for i := range src {
		switch r.Intn(60) {
		case 0:
			src[i] = float32(math.NaN())
		case 1:
			src[i] = float32(math.Inf(1 - 2*r.Intn(2)))
		case 2:
			src[i] = -src[max(0, i-1)] // magnitude ties of opposite sign
		}
	}
	if mode == modeUnit && nb > 1 {
		clear(src[:256]) // an all-zero block
	}
	want := make([]byte, nb*q8KBytes)
	for b := range nb {
		quant.QuantizeBlockQ8_K((*[256]float32)(src[256*b:]), (*[q8KBytes]byte)(want[q8KBytes*b:]))
	}
	quantizers := map[string]func(dst []byte, src []float32){"quantQ8_KFast": quantQ8_KFast}
	for _, k := range allKernels() {
		quantizers[k.name] = k.quantQ8_K
	}
	for name, quantize := range quantizers {
		got := make([]byte, nb*q8KBytes)
		quantize(got, src)
		if !bytes.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s nb=%d mode=%d: byte %d (block %d) = %d, want %d", name, nb, mode, i, i/q8KBytes, got[i], want[i])
				}
			}
		}
	}
}

func TestQuantQ8_K(t *testing.T) {
	for _, nb := range []int{1, 2, 5} {
		for mode := range numModes {
			checkQuantQ8_K(t, int64(nb*10+mode), nb, mode)
		}
	}
}

func FuzzQuantQ8_K(f *testing.F) {
	f.Add(int64(1), uint8(1), uint8(modeRandom))
	f.Add(int64(2), uint8(3), uint8(modeExtreme))
	f.Fuzz(func(t *testing.T, seed int64, nb, mode uint8) {
		checkQuantQ8_K(t, seed, int(nb%8)+1, int(mode%numModes))
	})
}

// TestQuantQ8_KEdges checks the Q8_K quantizers on blocks whose scale overflows (tiny
// denormal maxima), with infinities, and with a maximum reached by both signs.
func TestQuantQ8_KEdges(t *testing.T) {
	tiny := math.Float32frombits(3) // denormal: -127/tiny overflows to -Inf
	blocks := map[string]func(i int) float32{
		"denormal":  func(i int) float32 { return tiny * float32(i%3-1) },
		"inf":       func(i int) float32 { return []float32{float32(math.Inf(1)), 1, -2, 0}[i%4] },
		"both-sign": func(i int) float32 { return float32(i%7 - 3) },
		"nan-first": func(i int) float32 { return []float32{float32(math.NaN()), 0.5, -0.25}[i%3] },
	}
	for name, f := range blocks {
		src := make([]float32, 256)
		for i := range src {
			src[i] = f(i)
		}
		want := make([]byte, q8KBytes)
		quant.QuantizeBlockQ8_K((*[256]float32)(src), (*[q8KBytes]byte)(want))
		for _, k := range allKernels() {
			got := make([]byte, q8KBytes)
			k.quantQ8_K(got, src)
			if !bytes.Equal(got, want) {
				t.Errorf("%s %s: quants differ from quant.QuantizeBlockQ8_K", name, k.name)
			}
		}
	}
}
