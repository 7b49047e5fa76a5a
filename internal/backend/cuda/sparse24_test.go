package cuda

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// le returns 16-bit values as little-endian bytes.
func le(vals ...uint16) []byte {
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(b[2*i:], v)
	}
	return b
}

func TestIs2of4(t *testing.T) {
	one, neg := quant.F32ToBF16(1), quant.F32ToBF16(-0.5)
	for _, c := range []struct {
		name        string
		data        []byte
		cols        int
		ok, negZero bool
	}{
		{"two of four", le(one, 0, neg, 0, 0, 0, 0, one), 8, true, false},
		{"all zero", le(0, 0, 0, 0), 4, true, false},
		{"three of four", le(one, one, 0, neg), 4, false, false},
		{"dense", le(one, one, one, one), 4, false, false},
		{"second row dense", le(one, 0, 0, 0, one, one, one, 0), 4, false, false},
		{"negative zero counts as zero", le(one, 0x8000, one, 0), 4, true, true},
		{"cols not a multiple of four", le(one, 0, 0, one, 0, 0), 6, false, false},
		{"ragged data", le(one, 0, 0, 0, one), 4, false, false},
		{"empty", nil, 4, false, false},
		{"zero cols", le(0, 0, 0, 0), 0, false, false},
	} {
		ok, nz := Is2of4(c.data, c.cols)
		if ok != c.ok || nz != c.negZero {
			t.Errorf("%s: Is2of4 = %v, %v; want %v, %v", c.name, ok, nz, c.ok, c.negZero)
		}
	}
}

// TestIs2of4Random checks Is2of4 against a count of each group's nonzero values on random
// matrices pruned to 2:4, with one value put back in some of them.
func TestIs2of4Random(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := range 200 {
		rows, cols := 1+r.IntN(8), 4*(1+r.IntN(16))
		vals := make([]uint16, rows*cols)
		for i := range vals {
			vals[i] = quant.F32ToBF16(r.Float32() + 0.1)
		}
		for g := 0; g < len(vals); g += 4 {
			p := r.Perm(4)
			vals[g+p[0]], vals[g+p[1]] = 0, 0
		}
		want := true
		if trial%2 == 1 {
			g := 4 * r.IntN(len(vals)/4)
			for i := g; i < g+4; i++ {
				if vals[i] == 0 {
					vals[i] = quant.F32ToBF16(2)
					break
				}
			}
			want = false
		}
		if ok, _ := Is2of4(le(vals...), cols); ok != want {
			t.Fatalf("trial %d (%dx%d): Is2of4 = %v, want %v", trial, rows, cols, ok, want)
		}
	}
}

func TestZeroNegatives(t *testing.T) {
	in := le(0x8000, 0x3f80, 0, 0xbf80, 0x8000)
	got := ZeroNegatives(in)
	if want := le(0, 0x3f80, 0, 0xbf80, 0); !bytes.Equal(got, want) {
		t.Fatalf("ZeroNegatives = %x, want %x", got, want)
	}
	if !bytes.Equal(in, le(0x8000, 0x3f80, 0, 0xbf80, 0x8000)) {
		t.Fatal("ZeroNegatives changed its input")
	}
}

func FuzzIs2of4(f *testing.F) {
	f.Add(le(1, 0, 0, 1), 4)
	f.Add(le(1, 1, 1, 0, 0, 0x8000), 3)
	f.Fuzz(func(t *testing.T, data []byte, cols int) {
		ok, _ := Is2of4(data, cols)
		if !ok {
			return
		}
		if cols <= 0 || cols%4 != 0 || len(data)%(2*cols) != 0 {
			t.Fatalf("accepted %d bytes of rows of %d", len(data), cols)
		}
		for g := 0; g < len(data); g += 8 {
			n := 0
			for j := g; j < g+8; j += 2 {
				if v := binary.LittleEndian.Uint16(data[j:]); v&0x7fff != 0 {
					n++
				}
			}
			if n > 2 {
				t.Fatalf("accepted a group of %d values at byte %d", n, g)
			}
		}
	})
}

func TestSparseBucket(t *testing.T) {
	prev := 0
	for n := 1; n <= 20000; n++ {
		b := SparseBucket(n)
		if b < n || b%sparseBucketMin != 0 || b < prev {
			t.Fatalf("SparseBucket(%d) = %d (previous %d): want a multiple of %d, at least n, not decreasing", n, b, prev, sparseBucketMin)
		}
		if n > 256 && 2*b >= 3*n {
			t.Fatalf("SparseBucket(%d) = %d: half again n or more", n, b)
		}
		prev = b
	}
	for n, want := range map[int]int{1: 16, 8: 16, 17: 32, 256: 256, 257: 384, 512: 512, 513: 768, 2048: 2048, 2049: 3072} {
		if got := SparseBucket(n); got != want {
			t.Errorf("SparseBucket(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestSparseShapeOK(t *testing.T) {
	for _, c := range []struct {
		dt   DType
		m, k int
		ok   bool
	}{{BF16, 2048, 8192, true}, {F16, 32, 32, true}, {F32, 64, 64, false}, {BF16, 48, 64, false}, {BF16, 64, 36, false}, {BF16, 0, 64, false}} {
		if why := SparseShapeOK(c.dt, c.m, c.k); (why == "") != c.ok {
			t.Errorf("SparseShapeOK(%s, %d, %d) = %q, want ok=%v", c.dt, c.m, c.k, why, c.ok)
		}
	}
}

// BenchmarkIs2of4 times the upload's host check on a 2:4 matrix of 2048 x 8192 BF16
// values (one Llama 3.2 1B MLP matrix), every group read.
func BenchmarkIs2of4(b *testing.B) {
	const rows, cols = 2048, 8192
	data := make([]byte, 2*rows*cols)
	for g := 0; g < len(data); g += 8 {
		data[g], data[g+1] = 0x80, 0x3f // 1.0, 0, -2.0, 0
		data[g+4], data[g+5] = 0x00, 0xc0
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if ok, _ := Is2of4(data, cols); !ok {
			b.Fatal("not 2:4")
		}
	}
}
