package quant

import (
	"math/rand/v2"
	"testing"
)

// benchmarkDequantize measures decoding one row of n elements of typ.
func benchmarkDequantize(b *testing.B, typ Type, n int) {
	r := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	nb, err := typ.RowBytes(n)
	if err != nil {
		b.Fatal(err)
	}
	q := make([]byte, nb)
	if err := Quantize(typ, x, q); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(4 * n)) // decoded bytes per op
	b.ResetTimer()
	for b.Loop() {
		if err := Dequantize(typ, q, x); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDequantizeQ4_K(b *testing.B) { benchmarkDequantize(b, Q4_K, 4096) }
func BenchmarkDequantizeQ8_0(b *testing.B) { benchmarkDequantize(b, Q8_0, 4096) }
func BenchmarkDequantizeQ6_K(b *testing.B) { benchmarkDequantize(b, Q6_K, 4096) }
func BenchmarkDequantizeF16(b *testing.B)  { benchmarkDequantize(b, F16, 4096) }

func BenchmarkQuantizeQ4_K(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	q := make([]byte, 4096/256*144)
	b.SetBytes(4 * 4096)
	for b.Loop() {
		if err := Quantize(Q4_K, x, q); err != nil {
			b.Fatal(err)
		}
	}
}
