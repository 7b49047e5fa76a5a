package cpu

import (
	"math"
	"math/rand"
	"testing"
)

func normals(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func closeTo(a, b, tol float64) bool { return math.Abs(a-b) <= tol*(1+math.Abs(b)) }

func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	const dim, tokens, eps = 300, 130, 1e-5
	x := normals(r, dim*tokens)
	w := normals(r, dim)
	res0 := normals(r, dim*tokens)
	for _, p := range testPools(t, 1, 2) {
		out := make([]float32, len(x))
		if err := RMSNorm(p, out, x, w, tokens, eps); err != nil {
			t.Fatal(err)
		}
		res := append([]float32(nil), res0...)
		outR := make([]float32, len(x))
		if err := RMSNormResidual(p, outR, res, x, w, tokens, eps); err != nil {
			t.Fatal(err)
		}
		for tok := range tokens {
			var ss, ssR float64
			for i := range dim {
				v := float64(x[tok*dim+i])
				ss += v * v
				vr := float64(res0[tok*dim+i]) + v
				ssR += vr * vr
				if !closeTo(float64(res[tok*dim+i]), vr, 1e-6) {
					t.Fatalf("%s: residual[%d] = %g, want %g", p.KernelSet(), tok*dim+i, res[tok*dim+i], vr)
				}
			}
			inv := 1 / math.Sqrt(ss/dim+eps)
			invR := 1 / math.Sqrt(ssR/dim+eps)
			for i := range dim {
				k := tok*dim + i
				if want := float64(x[k]) * inv * float64(w[i]); !closeTo(float64(out[k]), want, 1e-5) {
					t.Fatalf("%s: rmsnorm out[%d] = %g, want %g", p.KernelSet(), k, out[k], want)
				}
				if want := (float64(res0[k]) + float64(x[k])) * invR * float64(w[i]); !closeTo(float64(outR[k]), want, 1e-5) {
					t.Fatalf("%s: rmsnorm residual out[%d] = %g, want %g", p.KernelSet(), k, outR[k], want)
				}
			}
		}
	}
	p := testPool(1)
	defer p.Close()
	if err := RMSNorm(p, make([]float32, 10), make([]float32, 20), w, 1, eps); err == nil {
		t.Fatal("short out accepted")
	}
}

func TestRope(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	const heads, headDim, maxPos = 3, 16, 64
	positions := []int32{0, 5, 63, 17}
	for _, ropeDim := range []int{16, 8} {
		cos, sin := RopeTables(maxPos, ropeDim, 10000)
		for _, style := range []RopeStyle{RopeInterleaved, RopeNeoX} {
			x := normals(r, len(positions)*heads*headDim)
			got := append([]float32(nil), x...)
			p := testPool(2)
			if err := Rope(p, got, len(positions), heads, headDim, ropeDim, positions, cos, sin, style); err != nil {
				t.Fatal(err)
			}
			p.Close()
			for tok, pos := range positions {
				for h := range heads {
					v := x[(tok*heads+h)*headDim:][:headDim]
					g := got[(tok*heads+h)*headDim:][:headDim]
					for i := range ropeDim / 2 {
						a, b := 2*i, 2*i+1
						if style == RopeNeoX {
							a, b = i, i+ropeDim/2
						}
						theta := float64(pos) * math.Pow(10000, -float64(2*i)/float64(ropeDim))
						wa := float64(v[a])*math.Cos(theta) - float64(v[b])*math.Sin(theta)
						wb := float64(v[a])*math.Sin(theta) + float64(v[b])*math.Cos(theta)
						if !closeTo(float64(g[a]), wa, 1e-5) || !closeTo(float64(g[b]), wb, 1e-5) {
							t.Fatalf("style %d ropeDim %d tok %d head %d pair %d: got (%g,%g) want (%g,%g)", style, ropeDim, tok, h, i, g[a], g[b], wa, wb)
						}
					}
					for i := ropeDim; i < headDim; i++ {
						if g[i] != v[i] {
							t.Fatalf("ropeDim %d: element %d beyond ropeDim changed", ropeDim, i)
						}
					}
				}
			}
		}
	}
	p := testPool(1)
	defer p.Close()
	cos, sin := RopeTables(8, 16, 10000)
	if err := Rope(p, make([]float32, 16), 1, 1, 16, 16, []int32{8}, cos, sin, RopeNeoX); err == nil {
		t.Fatal("position beyond the tables accepted")
	}
	if err := Rope(p, make([]float32, 16), 1, 1, 16, 18, []int32{0}, cos, sin, RopeNeoX); err == nil {
		t.Fatal("ropeDim > headDim accepted")
	}
}

func TestElementwise(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	p := testPool(2)
	defer p.Close()
	for _, n := range []int{1, 100, 70000} {
		g, u := normals(r, n), normals(r, n)
		out := make([]float32, n)
		if err := SwiGLU(p, out, g, u); err != nil {
			t.Fatal(err)
		}
		sum := make([]float32, n)
		if err := Add(p, sum, g, u); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			gi := float64(g[i])
			if want := gi / (1 + math.Exp(-gi)) * float64(u[i]); !closeTo(float64(out[i]), want, 1e-6) {
				t.Fatalf("swiglu[%d] = %g want %g", i, out[i], want)
			}
			if sum[i] != g[i]+u[i] {
				t.Fatalf("add[%d] = %g want %g", i, sum[i], g[i]+u[i])
			}
		}
	}
	if err := Add(p, make([]float32, 3), make([]float32, 3), make([]float32, 2)); err == nil {
		t.Fatal("mismatched add accepted")
	}
	if err := SwiGLU(p, make([]float32, 3), make([]float32, 2), make([]float32, 3)); err == nil {
		t.Fatal("mismatched swiglu accepted")
	}
}

func TestSoftmaxArgmax(t *testing.T) {
	x := []float32{1, 3, 2, 1000, -5}
	Softmax(x)
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	if !closeTo(s, 1, 1e-6) || x[3] < 0.999 {
		t.Fatalf("softmax = %v", x)
	}
	y := []float32{0, 1, 2}
	Softmax(y)
	e := []float64{1, math.E, math.E * math.E}
	for i := range y {
		if want := e[i] / (e[0] + e[1] + e[2]); !closeTo(float64(y[i]), want, 1e-6) {
			t.Fatalf("softmax[%d] = %g want %g", i, y[i], want)
		}
	}
	Softmax(nil)
	nan := float32(math.NaN())
	cases := []struct {
		x    []float32
		want int
	}{
		{nil, -1}, {[]float32{1}, 0}, {[]float32{1, 5, 5, 2}, 1}, {[]float32{-3, -1, -2}, 1},
		{[]float32{nan, 2, 7}, 2}, {[]float32{nan, nan}, 0},
	}
	for _, c := range cases {
		if got := Argmax(c.x); got != c.want {
			t.Errorf("Argmax(%v) = %d want %d", c.x, got, c.want)
		}
	}
}

func TestPoolRunCoversRange(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := testPool(threads)
		for _, n := range []int{0, 1, 2, 7, 100, 1001} {
			hits := make([]int32, n)
			for rep := 0; rep < 3; rep++ {
				p.Run(n, func(start, end int) {
					for i := start; i < end; i++ {
						hits[i]++
					}
				})
			}
			for i, h := range hits {
				if h != 3 {
					t.Fatalf("threads=%d n=%d: index %d run %d times, want 3", threads, n, i, h)
				}
			}
		}
		p.Close()
		p.Close()
		ran := 0
		p.Run(5, func(start, end int) { ran += end - start })
		if ran != 5 {
			t.Fatalf("Run after Close covered %d of 5", ran)
		}
	}
}

func TestPoolRunAllocs(t *testing.T) {
	p := testPool(2)
	defer p.Close()
	var sink [64]int
	fn := func(start, end int) { sink[start%64] += end - start }
	if a := testing.AllocsPerRun(100, func() { p.Run(64, fn) }); a != 0 {
		t.Fatalf("Run allocates %v times per call", a)
	}
}
