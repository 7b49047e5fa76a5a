package cpu

import (
	"math"
	"math/rand"
	"testing"
)

// The encoder kernels against float64 scalar references written here.

func randVals(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

func refLayerNorm(x, add, w, b []float32, dim int) []float64 {
	out := make([]float64, len(x))
	for t := 0; t < len(x)/dim; t++ {
		y := make([]float64, dim)
		var mean float64
		for i := range y {
			y[i] = float64(x[t*dim+i])
			if add != nil {
				y[i] += float64(add[t*dim+i])
			}
			mean += y[i]
		}
		mean /= float64(dim)
		var v float64
		for _, a := range y {
			v += (a - mean) * (a - mean)
		}
		v /= float64(dim)
		for i, a := range y {
			out[t*dim+i] = (a-mean)/math.Sqrt(v+1e-12)*float64(w[i]) + float64(b[i])
		}
	}
	return out
}

func refAttention(q, k, v []float32, starts []int32, heads, hd int, scale float64, slopes []float64) []float64 {
	width := heads * hd
	out := make([]float64, len(q))
	for s := 0; s+1 < len(starts); s++ {
		lo, hi := int(starts[s]), int(starts[s+1])
		for t := lo; t < hi; t++ {
			for h := range heads {
				sc := make([]float64, hi-lo)
				var z, best float64 = 0, math.Inf(-1)
				for j := lo; j < hi; j++ {
					for e := range hd {
						sc[j-lo] += float64(q[t*width+h*hd+e]) * float64(k[j*width+h*hd+e])
					}
					sc[j-lo] *= scale
					if slopes != nil {
						sc[j-lo] -= slopes[h] * math.Abs(float64(t-j))
					}
					best = math.Max(best, sc[j-lo])
				}
				for j := range sc {
					sc[j] = math.Exp(sc[j] - best)
					z += sc[j]
				}
				for j := lo; j < hi; j++ {
					for e := range hd {
						out[t*width+h*hd+e] += sc[j-lo] / z * float64(v[j*width+h*hd+e])
					}
				}
			}
		}
	}
	return out
}

func within(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*(1+math.Abs(want[i])) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s[%d] = %v, reference %v", what, i, got[i], want[i])
		}
	}
}

func TestLayerNormMatchesReference(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for _, p := range testPools(t, 1, 3) {
		for _, shape := range [][2]int{{1, 8}, {5, 384}, {300, 128}} {
			rows, dim := shape[0], shape[1]
			x, add := randVals(r, rows*dim, 3), randVals(r, rows*dim, 1)
			w, b := randVals(r, dim, 1), randVals(r, dim, 0.5)
			for _, a := range [][]float32{nil, add} {
				out := make([]float32, rows*dim)
				if err := LayerNorm(p, out, x, a, w, b, rows, 1e-12); err != nil {
					t.Fatal(err)
				}
				within(t, "layernorm", out, refLayerNorm(x, a, w, b, dim), 1e-5)
			}
			// In place, into the addend: x + add normalized over add.
			want := refLayerNorm(x, add, w, b, dim)
			inPlace := append([]float32(nil), add...)
			if err := LayerNorm(p, inPlace, x, inPlace, w, b, rows, 1e-12); err != nil {
				t.Fatal(err)
			}
			within(t, "layernorm in place", inPlace, want, 1e-5)
		}
		if err := LayerNorm(p, make([]float32, 4), make([]float32, 4), nil, make([]float32, 4), make([]float32, 3), 1, 1e-5); err == nil {
			t.Error("a bias of the wrong length was accepted")
		}
	}
}

func TestGELUMatchesReference(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	for _, p := range testPools(t, 1, 3) {
		x := randVals(r, 50000, 3)
		x = append(x, 0, -0, 40, -40, 1e-30)
		out := make([]float32, len(x))
		if err := GELU(p, out, x); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, len(x))
		for i, v := range x {
			want[i] = float64(v) * 0.5 * math.Erfc(-float64(v)/math.Sqrt2)
		}
		within(t, "gelu", out, want, 1e-6)
	}
}

func TestGELUGLUMatchesReference(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	for _, p := range testPools(t, 1, 3) {
		gate, up := randVals(r, 20000, 3), randVals(r, 20000, 2)
		out := make([]float32, len(gate))
		if err := GELUGLU(p, out, gate, up); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, len(gate))
		for i, g := range gate {
			want[i] = float64(g) * 0.5 * math.Erfc(-float64(g)/math.Sqrt2) * float64(up[i])
		}
		within(t, "gelu glu", out, want, 1e-6)
		if err := GELUGLU(p, out, gate, up[1:]); err == nil {
			t.Error("mismatched lengths were accepted")
		}
	}
}

func TestBidirectionalAttentionMatchesReference(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for _, p := range testPools(t, 1, 3) {
		for _, lens := range [][]int32{{1}, {7}, {3, 1, 40, 5}, {130, 2}} {
			starts := []int32{0}
			for _, n := range lens {
				starts = append(starts, starts[len(starts)-1]+n)
			}
			n := int(starts[len(starts)-1])
			heads, hd := 4, 32
			q, k, v := randVals(r, n*heads*hd, 1), randVals(r, n*heads*hd, 1), randVals(r, n*heads*hd, 1)
			out := make([]float32, n*heads*hd)
			scale := 1 / math.Sqrt(float64(hd))
			if err := BidirectionalAttention(p, out, q, k, v, starts, heads, hd, float32(scale), nil); err != nil {
				t.Fatal(err)
			}
			within(t, "attention", out, refAttention(q, k, v, starts, heads, hd, scale, nil), 1e-5)
			// ALiBi with slopes 1/2, 1/4, ...: scores fall off with distance.
			slopes := []float32{0.5, 0.25, 0.125, 0.0625}
			if err := BidirectionalAttention(p, out, q, k, v, starts, heads, hd, float32(scale), slopes); err != nil {
				t.Fatal(err)
			}
			within(t, "alibi attention", out, refAttention(q, k, v, starts, heads, hd, scale, []float64{0.5, 0.25, 0.125, 0.0625}), 1e-5)
		}
	}
}

func TestPoolRows(t *testing.T) {
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	starts := []int32{0, 3, 5}
	for _, c := range []struct {
		first, last bool
		want        []float32
	}{
		{false, false, []float32{3, 4, 8, 9}},
		{true, false, []float32{1, 2, 7, 8}},
		{false, true, []float32{5, 6, 9, 10}},
	} {
		dst := make([]float32, 4)
		if err := PoolRows(dst, x, 2, starts, c.first, c.last); err != nil {
			t.Fatal(err)
		}
		for i := range dst {
			if dst[i] != c.want[i] {
				t.Fatalf("first %v last %v: %v, want %v", c.first, c.last, dst, c.want)
			}
		}
	}
	if err := PoolRows(make([]float32, 4), x, 2, []int32{0, 3, 3}, false, false); err == nil {
		t.Error("an empty sequence was pooled")
	}
}

// FuzzBidirectionalAttention draws sequence layouts and head shapes from the fuzzer's
// bytes: the kernel matches the reference, and refuses layouts it cannot run.
func FuzzBidirectionalAttention(f *testing.F) {
	f.Add([]byte{3, 1, 5}, uint8(2), uint8(8), int64(1))
	f.Add([]byte{1}, uint8(1), uint8(1), int64(2))
	p := testPool(2)
	f.Cleanup(p.Close)
	f.Fuzz(func(t *testing.T, lens []byte, heads, hd uint8, seed int64) {
		if len(lens) == 0 || len(lens) > 8 || heads == 0 || heads > 8 || hd == 0 || hd > 64 {
			return
		}
		starts := []int32{0}
		for _, n := range lens {
			starts = append(starts, starts[len(starts)-1]+int32(n%50+1))
		}
		n, h, d := int(starts[len(starts)-1]), int(heads), int(hd)
		r := rand.New(rand.NewSource(seed))
		q, k, v := randVals(r, n*h*d, 1), randVals(r, n*h*d, 1), randVals(r, n*h*d, 1)
		out := make([]float32, n*h*d)
		var slopes []float32
		var ref []float64
		if seed%2 == 1 { // odd seeds add ALiBi slopes 1, 1/2, 1/4, ...
			for i := range h {
				slopes, ref = append(slopes, float32(math.Ldexp(1, -i))), append(ref, math.Ldexp(1, -i))
			}
		}
		if err := BidirectionalAttention(p, out, q, k, v, starts, h, d, 0.3, slopes); err != nil {
			t.Fatal(err)
		}
		within(t, "attention", out, refAttention(q, k, v, starts, h, d, 0.3, ref), 1e-5)
	})
}
