package lowrank

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/backendtest"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// rotation returns an n x n orthogonal matrix: a product of random Givens rotations.
func rotation(rng *rand.Rand, n int) [][]float64 {
	q := make([][]float64, n)
	for i := range q {
		q[i] = make([]float64, n)
		q[i][i] = 1
	}
	for range 4 * n * n {
		i, j := rng.IntN(n), rng.IntN(n)
		if i == j {
			continue
		}
		th := rng.Float64() * 2 * math.Pi
		c, s := math.Cos(th), math.Sin(th)
		for k := range n {
			a, b := q[k][i], q[k][j]
			q[k][i], q[k][j] = c*a-s*b, s*a+c*b
		}
	}
	return q
}

// TestFactorKnownSpectrum: W = P diag(5, 3, 1, 0.5) Qᵀ (P, Q orthogonal, built here) is
// given back exactly at full rank, at rank 2 with the Eckart-Young error 1^2 + 0.5^2, and
// energy 0.9 keeps rank 2 (25+9 of 35.25).
func TestFactorKnownSpectrum(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 6, 4
	sv := []float64{5, 3, 1, 0.5}
	p, q := rotation(rng, rows), rotation(rng, cols)
	w := make([]float32, rows*cols)
	for i := range rows {
		for j := range cols {
			var s float64
			for k, v := range sv {
				s += p[i][k] * v * q[j][k]
			}
			w[i*cols+j] = float32(s)
		}
	}
	errorAt := func(rank int, energy float64) (float64, int) {
		a, b, r, err := Factor(w, rows, cols, rank, energy)
		if err != nil {
			t.Fatal(err)
		}
		var e float64
		for i := range rows {
			for j := range cols {
				var s float64
				for k := range r {
					s += float64(b[i*r+k]) * float64(a[k*cols+j])
				}
				d := s - float64(w[i*cols+j])
				e += d * d
			}
		}
		return e, r
	}
	if e, r := errorAt(10, 0); r != 4 || e > 1e-10 {
		t.Errorf("full rank: rank %d, squared error %g", r, e)
	}
	if e, r := errorAt(2, 0); r != 2 || math.Abs(e-1.25) > 1e-5 {
		t.Errorf("rank 2: rank %d, squared error %g, want 1.25", r, e)
	}
	if e, r := errorAt(0, 0.9); r != 2 || math.Abs(e-1.25) > 1e-5 {
		t.Errorf("energy 0.9: rank %d, squared error %g", r, e)
	}
	if _, r := errorAt(0, 1); r != 4 {
		t.Errorf("energy 1: rank %d", r)
	}
}

func TestRank(t *testing.T) {
	s := []float64{3, 2, 1, 0}
	for _, tc := range []struct {
		rank   int
		energy float64
		want   int
	}{{2, 0, 2}, {9, 0, 4}, {0, 0.5, 1}, {0, 9.0 / 14, 1}, {0, 0.7, 2}, {0, 1, 3}} {
		if got := Rank(s, tc.rank, tc.energy); got != tc.want {
			t.Errorf("rank %d energy %g: %d, want %d", tc.rank, tc.energy, got, tc.want)
		}
	}
}

func open(t *testing.T, rel string) *format.Model {
	t.Helper()
	m, err := format.Open(testdata.Path(t, rel), format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestFullRankIsTheModel factorizes every block matrix at full rank: the file holds the
// pairs in place of the matrices, and the model it gives (the reference path, and the fast
// path whole and split over two tensor-parallel ranks) has the original's logits. The
// Hugging Face folder (NeoX rotary layout) checks that the q and k factors are permuted
// into GGUF's layout with their matrices.
func TestFullRankIsTheModel(t *testing.T) {
	for _, rel := range []string{"models/stories260K/stories260K.gguf", "models/tinystories-656k"} {
		m := open(t, rel)
		out := filepath.Join(t.TempDir(), "full.gguf")
		res, err := Factorize(m, out, Options{Rank: 100000})
		if err != nil {
			t.Fatal(err)
		}
		if res.Matrices != 7*m.Config.Layers {
			t.Fatalf("%s: %d matrices factorized", rel, res.Matrices)
		}
		f, err := format.Open(out, format.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, ok := f.Tensor("blk.0.attn_q.weight"); ok {
			t.Fatalf("%s: the dense q is still there", rel)
		}
		if _, ok := f.Tensor("blk.0.ffn_down.lr_b.weight"); !ok {
			t.Fatalf("%s: no ffn_down factor", rel)
		}
		tokens := []int32{1, 20, 33, 45, 70, 100, 12, 9}
		want := referenceLogits(t, m, tokens)
		for name, got := range map[string][][]float32{
			"reference":    referenceLogits(t, f, tokens),
			"fast":         fastLogits(t, f, tokens, model.Parallel{}),
			"fast, split2": fastLogits(t, f, tokens, model.Parallel{Tensor: 2}),
		} {
			for i := range want {
				for j := range want[i] {
					if d := math.Abs(float64(got[i][j] - want[i][j])); d > 2e-3 {
						t.Fatalf("%s %s: position %d logit %d: %g, original %g", rel, name, i, j, got[i][j], want[i][j])
					}
				}
			}
		}
	}
}

func referenceLogits(t *testing.T, m *format.Model, tokens []int32) [][]float32 {
	t.Helper()
	r, err := model.NewReference(m)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	for _, tok := range tokens {
		l, err := r.Forward(int(tok))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// fastLogits runs the tokens one at a time through the fast path on CPU backends.
func fastLogits(t *testing.T, m *format.Model, tokens []int32, par model.Parallel) [][]float32 {
	t.Helper()
	md, err := model.New(m, model.Options{Backends: backendtest.CPUBackends(t, 2, max(par.Tensor, 1)), Parallel: par})
	if err != nil {
		t.Fatal(err)
	}
	s, err := md.NewSession(64)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	for _, tok := range tokens {
		l, err := s.Prefill([]int32{tok})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]float32(nil), l...))
	}
	return out
}

// TestLowRankSmaller: rank 16 of stories260K's 64-wide matrices gives a smaller file whose
// model still runs; bad options and tensor selections are refused, leaving no file.
func TestLowRankSmaller(t *testing.T) {
	m := open(t, "models/stories260K/stories260K.gguf")
	dir := t.TempDir()
	out := filepath.Join(dir, "r16.gguf")
	res, err := Factorize(m, out, Options{Rank: 16, Tensors: regexp.MustCompile(`ffn_(gate|up|down)`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matrices != 15 || res.ParamsAfter >= res.ParamsBefore || res.MaxRank != 16 {
		t.Fatalf("%+v", res)
	}
	f, err := format.Open(out, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Bytes() >= m.Bytes() {
		t.Errorf("%d bytes, the original %d", f.Bytes(), m.Bytes())
	}
	if _, ok := f.Tensor("blk.0.attn_q.weight"); !ok {
		t.Error("attn_q was factorized too")
	}
	for _, l := range fastLogits(t, f, []int32{1, 5}, model.Parallel{}) {
		for _, v := range l {
			if math.IsNaN(float64(v)) {
				t.Fatal("NaN logits")
			}
		}
	}
	bad := filepath.Join(dir, "bad.gguf")
	for _, tc := range []struct {
		opt  Options
		want string
	}{
		{Options{}, "one of them"},
		{Options{Rank: 4, Energy: 0.5}, "one of them"},
		{Options{Energy: 1.5}, "outside (0, 1]"},
		{Options{Rank: 4, Tensors: regexp.MustCompile(`token_embd`)}, "not a block's weight matrix"},
		{Options{Rank: 4, Tensors: regexp.MustCompile(`nothing`)}, "no weight matrix matches"},
	} {
		if _, err := Factorize(m, bad, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.opt, err, tc.want)
		}
	}
	if _, err := Factorize(m, filepath.Join(dir, "folder"), Options{Rank: 4}); err == nil {
		t.Error("a folder output: no error")
	}
	if _, err := os.Stat(bad); err == nil {
		t.Error("a refused run left a file")
	}
}

// TestFactoredShapesChecked: a factor pair of the wrong shape is refused when the file is
// opened.
func TestFactoredShapesChecked(t *testing.T) {
	m := open(t, "models/stories260K/stories260K.gguf")
	dir := t.TempDir()
	out := filepath.Join(dir, "r8.gguf")
	if _, err := Factorize(m, out, Options{Rank: 8, Tensors: regexp.MustCompile(`blk\.0\.attn_q`)}); err != nil {
		t.Fatal(err)
	}
	f, err := format.Open(out, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ts []*format.Tensor
	for _, x := range f.Tensors {
		if x.Name == "blk.0.attn_q.lr_b.weight" {
			continue
		}
		ts = append(ts, x)
	}
	broken := filepath.Join(dir, "broken.gguf")
	if err := format.Convert(f.WithTensors(ts), broken, format.ConvertOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := format.Open(broken, format.Options{}); err == nil || !strings.Contains(err.Error(), "lr_b.weight is missing") {
		t.Errorf("a factor missing: %v", err)
	}
}
