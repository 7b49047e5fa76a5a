package train

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
)

// These tests check each op's backward pass against central finite differences of its
// forward pass: with a fixed random r, L(x) = sum r . f(x), and backward(dy = r) must give
// dL/dx. Sums are taken in float64; h = 1e-2 keeps float32 rounding small beside the
// differences while the O(h^2) truncation error stays well under the tolerance.

func randVec(rng *rand.Rand, n int, std float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * std)
	}
	return x
}

func weighted(r, y []float32) float64 {
	var s float64
	for i := range y {
		s += float64(r[i]) * float64(y[i])
	}
	return s
}

// checkGrad compares the analytic gradient grad of L with respect to x with central
// differences of L at up to 60 entries of x (all when fewer).
func checkGrad(t *testing.T, name string, x, grad []float32, L func() float64) {
	t.Helper()
	const h = 1e-2
	rng := rand.New(rand.NewPCG(7, uint64(len(x))))
	idx := make([]int, 0, 60)
	if len(x) <= 60 {
		for i := range x {
			idx = append(idx, i)
		}
	} else {
		for range 60 {
			idx = append(idx, rng.IntN(len(x)))
		}
	}
	var scale float64
	for _, g := range grad {
		scale = max(scale, math.Abs(float64(g)))
	}
	scale = max(scale, 1e-3)
	bad := 0
	for _, i := range idx {
		old := x[i]
		x[i] = old + h
		up := L()
		x[i] = old - h
		down := L()
		x[i] = old
		num := (up - down) / (2 * h)
		if d := math.Abs(num - float64(grad[i])); d > 1e-2*scale+1e-3*math.Abs(num) {
			if bad < 5 {
				t.Errorf("%s[%d]: analytic %.6g, numeric %.6g (largest gradient %.3g)", name, i, grad[i], num, scale)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d entries disagree", name, bad, len(idx))
	}
}

func TestLinearGrad(t *testing.T) {
	p := cpu.NewPool(2)
	defer p.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	n, in, out := 7, 12, 9
	x, w, r := randVec(rng, n*in, 1), randVec(rng, out*in, 0.5), randVec(rng, n*out, 1)
	L := func() float64 {
		y := make([]float32, n*out)
		linear(p, y, x, w, n, in, out)
		return weighted(r, y)
	}
	dx, dw := make([]float32, n*in), make([]float32, out*in)
	linearBackward(p, dx, dw, r, x, w, n, in, out)
	checkGrad(t, "dx", x, dx, L)
	checkGrad(t, "dw", w, dw, L)
}

func TestRMSNormGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n, d := 5, 16
	x, w, r := randVec(rng, n*d, 1), randVec(rng, d, 1), randVec(rng, n*d, 1)
	L := func() float64 {
		y, inv := make([]float32, n*d), make([]float32, n)
		rmsNorm(y, inv, x, w, n, d, 1e-5)
		return weighted(r, y)
	}
	y, inv := make([]float32, n*d), make([]float32, n)
	rmsNorm(y, inv, x, w, n, d, 1e-5)
	dx, dw := make([]float32, n*d), make([]float32, d)
	rmsNormBackward(dx, dw, r, x, inv, w, n, d)
	checkGrad(t, "dx", x, dx, L)
	checkGrad(t, "dw", w, dw, L)
}

func TestRopeGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	n, T, heads, hd := 6, 3, 2, 8
	cos, sin := ropeTables(T, hd, 10000)
	x, r := randVec(rng, n*heads*hd, 1), randVec(rng, n*heads*hd, 1)
	L := func() float64 {
		y := append([]float32(nil), x...)
		rope(y, n, T, heads, hd, cos, sin, false)
		return weighted(r, y)
	}
	dx := append([]float32(nil), r...)
	rope(dx, n, T, heads, hd, cos, sin, true)
	checkGrad(t, "dx", x, dx, L)
	// Position 0 is not rotated; the rotation keeps norms.
	y := append([]float32(nil), x...)
	rope(y, n, T, heads, hd, cos, sin, false)
	for i := 0; i < heads*hd; i++ {
		if y[i] != x[i] {
			t.Fatalf("position 0 rotated: %v != %v", y[i], x[i])
		}
	}
}

func TestAttentionGrad(t *testing.T) {
	p := cpu.NewPool(2)
	defer p.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	a := attnShape{seqs: 2, seqLen: 5, heads: 4, kvHeads: 2, hd: 6}
	n := a.seqs * a.seqLen
	q, k, v := randVec(rng, n*a.heads*a.hd, 1), randVec(rng, n*a.kvHeads*a.hd, 1), randVec(rng, n*a.kvHeads*a.hd, 1)
	r := randVec(rng, n*a.heads*a.hd, 1)
	probs := make([]float32, a.seqs*a.heads*a.seqLen*a.seqLen)
	L := func() float64 {
		out := make([]float32, n*a.heads*a.hd)
		attention(p, out, make([]float32, len(probs)), q, k, v, a)
		return weighted(r, out)
	}
	out := make([]float32, n*a.heads*a.hd)
	attention(p, out, probs, q, k, v, a)
	dq, dk, dv := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
	attentionBackward(p, dq, dk, dv, r, probs, q, k, v, a)
	checkGrad(t, "dq", q, dq, L)
	checkGrad(t, "dk", k, dk, L)
	checkGrad(t, "dv", v, dv, L)
	// Causality: the first position of each sequence sees only its own value.
	for b := 0; b < a.seqs; b++ {
		for h := 0; h < a.heads; h++ {
			kh := h / (a.heads / a.kvHeads)
			for i := 0; i < a.hd; i++ {
				got := out[(b*a.seqLen)*a.heads*a.hd+h*a.hd+i]
				want := v[(b*a.seqLen)*a.kvHeads*a.hd+kh*a.hd+i]
				if math.Abs(float64(got-want)) > 1e-6 {
					t.Fatalf("seq %d head %d: first position's output %v, want its value %v", b, h, got, want)
				}
			}
		}
	}
}

func TestSwiGLUGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	n := 40
	g, u, r := randVec(rng, n, 2), randVec(rng, n, 1), randVec(rng, n, 1)
	L := func() float64 {
		h := make([]float32, n)
		swiGLU(h, g, u)
		return weighted(r, h)
	}
	dg, du := make([]float32, n), make([]float32, n)
	swiGLUBackward(dg, du, r, g, u)
	checkGrad(t, "dg", g, dg, L)
	checkGrad(t, "du", u, du, L)
}

func TestEmbedGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	vocab, d := 6, 4
	tokens := []int32{1, 3, 1, 5}
	e, r := randVec(rng, vocab*d, 1), randVec(rng, len(tokens)*d, 1)
	L := func() float64 {
		x := make([]float32, len(tokens)*d)
		embed(x, e, tokens, d)
		return weighted(r, x)
	}
	de := make([]float32, vocab*d)
	embedBackward(de, r, tokens, d)
	checkGrad(t, "de", e, de, L)
}

// lossOf returns the mean objective of logits (which loss also writes the gradient of).
func lossOf(p *cpu.Pool, logits []float32, vocab int, targets []int32, tk *TopK, opt LossOptions) (float64, []float32) {
	d := make([]float32, len(logits))
	rows := make([]int, len(targets))
	for i := range rows {
		rows[i] = i
	}
	st := loss(p, d, logits, vocab, targets, tk, rows, opt)
	return st.loss / float64(st.n), d
}

func TestLossGrad(t *testing.T) {
	p := cpu.NewPool(2)
	defer p.Close()
	rng := rand.New(rand.NewPCG(13, 14))
	n, vocab, k := 4, 11, 5
	logits := randVec(rng, n*vocab, 2)
	tk := TopKOf(randVec(rng, n*vocab, 3), vocab, k)
	targets := []int32{0, 4, 10, 7}
	for _, opt := range []LossOptions{{Alpha: 1, Temperature: 1}, {Alpha: 0, Temperature: 2}, {Alpha: 0.3, Temperature: 1.5}} {
		_, d := lossOf(p, logits, vocab, targets, &tk, opt)
		checkGrad(t, "dlogits", logits, d, func() float64 {
			l, _ := lossOf(p, logits, vocab, targets, &tk, opt)
			return l
		})
	}
}

func TestKLZeroWhenStudentIsTeacher(t *testing.T) {
	p := cpu.NewPool(1)
	defer p.Close()
	rng := rand.New(rand.NewPCG(15, 16))
	n, vocab := 3, 9
	logits := randVec(rng, n*vocab, 2)
	full := TopKOf(logits, vocab, vocab) // k = vocab: nothing renormalized away
	d := make([]float32, len(logits))
	st := loss(p, d, logits, vocab, []int32{1, 2, 3}, &full, []int{0, 1, 2}, LossOptions{Alpha: 0, Temperature: 2})
	if math.Abs(st.kl) > 1e-9 {
		t.Fatalf("KL of a distribution from itself: %g", st.kl)
	}
	for i, g := range d {
		if math.Abs(float64(g)) > 1e-7 {
			t.Fatalf("gradient %d of a zero KL: %g", i, g)
		}
	}
	// With k < vocab the student's mass outside the top k is penalized: KL > 0.
	top := TopKOf(logits, vocab, 3)
	st = loss(p, d, logits, vocab, []int32{1, 2, 3}, &top, []int{0, 1, 2}, LossOptions{Alpha: 0, Temperature: 1})
	if st.kl <= 0 {
		t.Fatalf("KL against the renormalized top 3: %g, want > 0", st.kl)
	}
}

// TestModelGrad checks the whole model's backward pass, every tensor, tied and untied.
func TestModelGrad(t *testing.T) {
	p := cpu.NewPool(2)
	defer p.Close()
	for _, tied := range []bool{true, false} {
		c := Config{Dim: 8, Layers: 2, Heads: 2, KVHeads: 1, Hidden: 12, Ctx: 4, NormEps: 1e-5, RopeTheta: 10000, Tied: &tied, Vocab: 10}
		m, err := NewModel(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		// Larger weights than the 0.02 initialization, so every path carries signal.
		rng := rand.New(rand.NewPCG(17, 18))
		for _, q := range m.Params() {
			for i := range q.W {
				q.W[i] += float32(rng.NormFloat64() * 0.2)
			}
		}
		tokens := []int32{1, 2, 3, 4, 9, 8, 7, 6}
		targets := []int32{2, 3, 4, 5, 8, 7, 6, 0}
		tk := TopKOf(randVec(rng, 8*c.Vocab, 2), c.Vocab, 4)
		opt := LossOptions{Alpha: 0.5, Temperature: 2}
		L := func() float64 {
			tp := m.forward(p, tokens, 2, 4)
			l, _ := lossOf(p, tp.logits, c.Vocab, targets, &tk, opt)
			return l
		}
		tp := m.forward(p, tokens, 2, 4)
		_, d := lossOf(p, tp.logits, c.Vocab, targets, &tk, opt)
		g := m.zeroLike()
		m.backward(p, tp, d, g)
		gs := g.Params()
		for i, q := range m.Params() {
			checkGrad(t, q.Name, q.W, gs[i].W, L)
		}
	}
}

func TestTranspose(t *testing.T) {
	for _, sh := range [][2]int{{1, 1}, {3, 70}, {65, 33}} {
		rows, cols := sh[0], sh[1]
		a := make([]float32, rows*cols)
		for i := range a {
			a[i] = float32(i)
		}
		d := make([]float32, len(a))
		transpose(d, a, rows, cols)
		for r := 0; r < rows; r++ {
			for c := 0; c < cols; c++ {
				if d[c*rows+r] != a[r*cols+c] {
					t.Fatalf("%dx%d: [%d][%d] = %v, want %v", rows, cols, c, r, d[c*rows+r], a[r*cols+c])
				}
			}
		}
	}
}
