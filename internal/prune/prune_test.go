package prune

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

func TestParsePattern(t *testing.T) {
	if p, err := ParsePattern("2:4"); err != nil || p != (Pattern{2, 4}) || p.Sparsity() != 0.5 {
		t.Fatalf("2:4: %v %v", p, err)
	}
	for _, s := range []string{"", "2", "4:2", "2:2", "0:4", "a:4", "2:b", "1:65", "-1:4", "2:4:8"} {
		if _, err := ParsePattern(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}

func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"2:4", "4:8", "1:1", ":", "9999999999999999999:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePattern(s)
		if err != nil {
			return
		}
		if p.N <= 0 || p.M <= p.N || p.M > 64 {
			t.Fatalf("%q accepted as %v", s, p)
		}
		if q, err := ParsePattern(p.String()); err != nil || q != p {
			t.Fatalf("%q -> %v does not round-trip: %v %v", s, p, q, err)
		}
	})
}

func TestMask(t *testing.T) {
	score := []float64{
		5, 1, 4, 2, 3, 0, 7, 6,
		1, 1, 1, 1, 2, 2, 2, 2,
	}
	got := Mask(score, 2, 8, 0.5, Pattern{})
	want := "10100011" + "00001111"
	if s := bits(got); s != want {
		t.Errorf("50%%: %s, want %s", s, want)
	}
	got = Mask(score, 2, 8, 0, Pattern{2, 4})
	want = "10100011" + "11001100" // ties: the earlier column kept
	if s := bits(got); s != want {
		t.Errorf("2:4: %s, want %s", s, want)
	}
	if s := bits(Mask(score[:8], 1, 8, 0.3, Pattern{})); s != "10111011" { // 2.4 rounds to 2 pruned
		t.Errorf("30%%: %s", s)
	}
}

func bits(m []bool) string {
	var b strings.Builder
	for _, k := range m {
		if k {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

// correlated returns n tokens of cols inputs with correlated channels of unequal scales:
// what makes SparseGPT's updates and Wanda's norms matter.
func correlated(rng *rand.Rand, n, cols int) *calibrate.Dense {
	x := &calibrate.Dense{Rows: n, Cols: cols, Data: make([]float32, n*cols)}
	for t := range n {
		base := rng.NormFloat64()
		for j := range cols {
			x.Data[t*cols+j] = float32((0.7*base + rng.NormFloat64()) * (1 + float64(j%5)))
		}
	}
	return x
}

func randomDense(rng *rand.Rand, name string, rows, cols int) *calibrate.Dense {
	w := &calibrate.Dense{Name: name, Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	for i := range w.Data {
		w.Data[i] = float32(rng.NormFloat64())
	}
	return w
}

// outputError is ||X W^T - X V^T||^2.
func outputError(x, w, v *calibrate.Dense) float64 {
	var e float64
	for t := range x.Rows {
		xt := x.Row(t)
		for r := range w.Rows {
			var a, b float64
			for j, xv := range xt {
				a += float64(xv) * float64(w.Row(r)[j])
				b += float64(xv) * float64(v.Row(r)[j])
			}
			e += (a - b) * (a - b)
		}
	}
	return e
}

func clone(d *calibrate.Dense) *calibrate.Dense {
	c := *d
	c.Data = append([]float32(nil), d.Data...)
	return &c
}

// TestSparseGPTBeatsMasking: on correlated inputs SparseGPT's output error is below that
// of zeroing the same share of weights by magnitude or by Wanda's score, for unstructured
// 50% and for 2:4, and every row has the sparsity asked for.
func TestSparseGPTBeatsMasking(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := cpu.NewPool(2)
	defer p.Close()
	x := correlated(rng, 256, 32)
	w := randomDense(rng, "w", 16, 32)
	h, err := NewHessian(p, x, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	norms := ColumnNorms(x)
	for _, pat := range []Pattern{{}, {2, 4}} {
		pr := &pruner{opt: Options{Sparsity: 0.5, Pattern: pat}}
		mag, wanda, sgpt := clone(w), clone(w), clone(w)
		pr.pruneScored(mag, nil)
		pr.pruneScored(wanda, norms)
		if err := SparseGPT(p, sgpt, h, 0.5, pat, 8); err != nil {
			t.Fatal(err)
		}
		for _, v := range []*calibrate.Dense{mag, wanda, sgpt} {
			for r := range v.Rows {
				row := v.Row(r)
				for g := 0; g < len(row); g += 4 {
					zeros := 0
					for _, x := range row[g : g+4] {
						if x == 0 {
							zeros++
						}
					}
					if pat.M == 4 && zeros < 2 {
						t.Fatalf("%v: row %d group %d has %d zeros", pat, r, g/4, zeros)
					}
				}
				zeros := 0
				for _, x := range row {
					if x == 0 {
						zeros++
					}
				}
				if zeros != 16 {
					t.Fatalf("%v: row %d has %d zeros of 32", pat, r, zeros)
				}
			}
		}
		em, ew, es := outputError(x, w, mag), outputError(x, w, wanda), outputError(x, w, sgpt)
		t.Logf("%v: output error magnitude %.1f, wanda %.1f, sparsegpt %.1f", pat, em, ew, es)
		if !(es < ew && ew < em) {
			t.Errorf("%v: output errors magnitude %.1f, wanda %.1f, sparsegpt %.1f: want sparsegpt < wanda < magnitude", pat, em, ew, es)
		}
	}
}

// TestSparseGPTIsOBS: pruning one weight of a row moves the others by the optimal brain
// surgeon's update, -w_q [H^-1]_{qj} / [H^-1]_{qq}, with H^-1 computed here by Gauss-Jordan.
func TestSparseGPTIsOBS(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := cpu.NewPool(1)
	defer p.Close()
	const n = 4
	x := correlated(rng, 64, n)
	w := &calibrate.Dense{Name: "w", Rows: 1, Cols: n, Data: []float32{0.01, 1, -2, 1.5}}
	h, err := NewHessian(p, x, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	// The same dampened H, inverted independently.
	hh, _ := hessianForTest(x, 0.01)
	inv := gaussJordan(hh, n)
	got := clone(w)
	if err := SparseGPT(p, got, h, 0.25, Pattern{}, 128); err != nil {
		t.Fatal(err)
	}
	for j := range n {
		want := float64(w.Data[j]) - float64(w.Data[0])*inv[0*n+j]/inv[0]
		if math.Abs(float64(got.Data[j])-want) > 1e-4 {
			t.Errorf("column %d: %g, OBS %g", j, got.Data[j], want)
		}
	}
}

func hessianForTest(x *calibrate.Dense, damp float64) ([]float64, int) {
	n := x.Cols
	h := make([]float64, n*n)
	for t := range x.Rows {
		r := x.Row(t)
		for i := range n {
			for j := range n {
				h[i*n+j] += 2 * float64(r[i]) * float64(r[j]) / float64(x.Rows)
			}
		}
	}
	var mean float64
	for i := range n {
		mean += h[i*n+i] / float64(n)
	}
	for i := range n {
		h[i*n+i] += damp * mean
	}
	return h, n
}

func gaussJordan(a []float64, n int) []float64 {
	m := make([]float64, n*2*n)
	for i := range n {
		copy(m[i*2*n:], a[i*n:(i+1)*n])
		m[i*2*n+n+i] = 1
	}
	for c := range n {
		piv := m[c*2*n+c]
		for j := range 2 * n {
			m[c*2*n+j] /= piv
		}
		for r := range n {
			if r != c {
				f := m[r*2*n+c]
				for j := range 2 * n {
					m[r*2*n+j] -= f * m[c*2*n+j]
				}
			}
		}
	}
	inv := make([]float64, n*n)
	for i := range n {
		copy(inv[i*n:], m[i*2*n+n:(i+1)*2*n])
	}
	return inv
}

func openStories(t *testing.T, name string) *format.Model {
	t.Helper()
	m, err := format.Open(testdata.Path(t, "models/stories260K/"+name), format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

var storiesCalib = [][]int32{{1, 403, 407, 261, 378, 425, 375, 302, 415, 443, 332, 260, 384, 290, 267, 275},
	{1, 415, 443, 332, 260, 384, 290, 267, 403, 407, 261, 378, 425, 375, 302, 280}}

// TestPruneWritesSparseModel prunes stories260K with each method (ffn_down's 172 columns
// take 2:4) and reads the file back: the block matrices have the sparsity asked for, every
// other tensor is unchanged, and the reference forward pass runs on it.
func TestPruneWritesSparseModel(t *testing.T) {
	m := openStories(t, "stories260K.gguf")
	dir := t.TempDir()
	for _, tc := range []struct {
		method string
		sp     float64
		pat    Pattern
	}{{"magnitude", 0.5, Pattern{}}, {"wanda", 0.5, Pattern{}}, {"sparsegpt", 0.5, Pattern{}}, {"wanda", 0, Pattern{2, 4}}, {"sparsegpt", 0, Pattern{2, 4}}} {
		out := filepath.Join(dir, tc.method+tc.pat.String()+".gguf")
		err := Prune(m, out, Options{Method: tc.method, Sparsity: tc.sp, Pattern: tc.pat, Calibration: storiesCalib, Threads: 2})
		if err != nil {
			t.Fatalf("%s %v: %v", tc.method, tc.pat, err)
		}
		pm, err := format.Open(out, format.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, src := range m.Tensors {
			got, ok := pm.Tensor(src.Name)
			if !ok || got.Type != src.Type {
				t.Fatalf("%s: tensor %q missing or of another type", out, src.Name)
			}
			_, rest, block := blockOf(src.Name)
			isLinear := block && strings.HasSuffix(rest, ".weight") && contains(linearNames, rest)
			if !isLinear {
				if string(got.Data) != string(src.Data) {
					t.Errorf("%s: tensor %q changed", out, src.Name)
				}
				continue
			}
			d, err := calibrate.Load(pm, src.Name)
			if err != nil {
				t.Fatal(err)
			}
			for r := range d.Rows {
				zeros := 0
				for _, v := range d.Row(r) {
					if v == 0 {
						zeros++
					}
				}
				if want := d.Cols / 2; zeros < want {
					t.Fatalf("%s %s row %d: %d zeros of %d", out, src.Name, r, zeros, d.Cols)
				}
			}
		}
		ref, err := model.NewReference(pm)
		if err != nil {
			t.Fatal(err)
		}
		logits, err := ref.Forward(1)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range logits {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s: logit %g", out, v)
			}
		}
		pm.Close()
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestPruneRefuses: each bad input is a clear error and leaves no file behind.
func TestPruneRefuses(t *testing.T) {
	m := openStories(t, "stories260K.gguf")
	q8 := openStories(t, "stories260K-Q8_0.gguf")
	dir := t.TempDir()
	out := filepath.Join(dir, "out.gguf")
	for _, tc := range []struct {
		m    *format.Model
		opt  Options
		want string
	}{
		{m, Options{Method: "random", Sparsity: 0.5}, "unknown method"},
		{m, Options{Method: "magnitude", Sparsity: 1}, "outside [0, 1)"},
		{m, Options{Method: "magnitude", Sparsity: -0.1}, "outside [0, 1)"},
		{m, Options{Method: "magnitude", Sparsity: math.NaN()}, "outside [0, 1)"},
		{m, Options{Method: "wanda", Sparsity: 0.5}, "needs calibration"},
		{m, Options{Method: "sparsegpt", Pattern: Pattern{4, 8}, Calibration: storiesCalib}, "not a multiple of the pattern"},
		{q8, Options{Method: "magnitude", Sparsity: 0.5}, "prune a F32, F16 or BF16 model"},
	} {
		err := Prune(tc.m, out, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.opt, err, tc.want)
		}
	}
	if _, err := Structured(m, out, StructuredOptions{DropHeads: 3, Calibration: storiesCalib}); err == nil || !strings.Contains(err.Error(), "multiple of 4") {
		t.Errorf("3 heads of 8 with 4 KV heads: %v", err)
	}
	if _, err := Structured(m, out, StructuredOptions{DropLayers: 5, Calibration: storiesCalib}); err == nil {
		t.Error("dropping all 5 layers: no error")
	}
	if _, err := Structured(m, out, StructuredOptions{DropLayers: 1}); err == nil || !strings.Contains(err.Error(), "calibration") {
		t.Errorf("no calibration: %v", err)
	}
	// A failure while writing (an output folder that cannot be made) leaves nothing.
	if err := Prune(m, filepath.Join(dir, "missing", "sub", "out"), Options{Method: "magnitude", Sparsity: 0.5}); err == nil {
		t.Error("an output under a missing folder: no error")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("files left behind: %v", entries)
	}
}

// withTensors returns m with the named tensors' values changed by edit.
func withEdited(t *testing.T, m *format.Model, edit map[string]func(d *calibrate.Dense)) *format.Model {
	t.Helper()
	var ts []*format.Tensor
	for _, src := range m.Tensors {
		if f, ok := edit[src.Name]; ok {
			d, err := calibrate.Load(m, src.Name)
			if err != nil {
				t.Fatal(err)
			}
			f(d)
			e, err := encode(d, src.Type, src.Shape)
			if err != nil {
				t.Fatal(err)
			}
			src = e
		}
		ts = append(ts, src)
	}
	return m.WithTensors(ts)
}

// TestDropLayersChoosesIdleLayer: a block whose attention and MLP outputs are zeroed does
// not turn the residual stream (influence 0) and is the layer dropped; the smaller model
// gives the reference logits of the edited one.
func TestDropLayersChoosesIdleLayer(t *testing.T) {
	m := openStories(t, "stories260K.gguf")
	zero := func(d *calibrate.Dense) { clear(d.Data) }
	edited := withEdited(t, m, map[string]func(*calibrate.Dense){"blk.2.attn_output.weight": zero, "blk.2.ffn_down.weight": zero})
	out := filepath.Join(t.TempDir(), "small.gguf")
	imp, err := Structured(edited, out, StructuredOptions{DropLayers: 1, Calibration: storiesCalib, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("influence %v", imp.LayerInfluence)
	if len(imp.DroppedLayers) != 1 || imp.DroppedLayers[0] != 2 || math.Abs(imp.LayerInfluence[2]) > 1e-6 {
		t.Fatalf("dropped %v, influence %v: want layer 2 at 0", imp.DroppedLayers, imp.LayerInfluence)
	}
	for l, v := range imp.LayerInfluence {
		if l != 2 && v < 1e-4 {
			t.Errorf("layer %d influence %g", l, v)
		}
	}
	sameLogits(t, edited, out, 4)
}

// TestDropHeadsChoosesIdleHeads: heads whose output-projection columns are zero contribute
// nothing and are the ones dropped (one of each key/value group); the model with 4 heads a
// layer gives the reference logits of the edited one with 8.
func TestDropHeadsChoosesIdleHeads(t *testing.T) {
	m := openStories(t, "stories260K.gguf")
	c := m.Config
	idle := []int{1, 2, 5, 6} // one of each group of two
	edit := map[string]func(*calibrate.Dense){}
	for l := range c.Layers {
		edit[blockTensor(l, "attn_output.weight")] = func(d *calibrate.Dense) {
			for r := range d.Rows {
				for _, h := range idle {
					clear(d.Row(r)[h*c.HeadDim : (h+1)*c.HeadDim])
				}
			}
		}
	}
	edited := withEdited(t, m, edit)
	out := filepath.Join(t.TempDir(), "heads.gguf")
	imp, err := Structured(edited, out, StructuredOptions{DropHeads: 4, Calibration: storiesCalib, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	for l, d := range imp.DroppedHeads {
		if len(d) != 4 || d[0] != 1 || d[1] != 2 || d[2] != 5 || d[3] != 6 {
			t.Fatalf("layer %d: dropped %v (importance %v)", l, d, imp.HeadImportance[l])
		}
	}
	sameLogits(t, edited, out, 4)
}

func blockTensor(l int, rest string) string { return fmt.Sprintf("blk.%d.%s", l, rest) }

// sameLogits checks that the model written at path gives a's reference logits over a few
// tokens.
func sameLogits(t *testing.T, a *format.Model, path string, n int) {
	t.Helper()
	b, err := format.Open(path, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ra, err := model.NewReference(a)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := model.NewReference(b)
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range storiesCalib[0][:n] {
		la, err := ra.Forward(int(tok))
		if err != nil {
			t.Fatal(err)
		}
		lb, err := rb.Forward(int(tok))
		if err != nil {
			t.Fatal(err)
		}
		for j := range la {
			if math.Abs(float64(la[j]-lb[j])) > 1e-4 {
				t.Fatalf("position %d logit %d: %g, before dropping %g", i, j, lb[j], la[j])
			}
		}
	}
}

// TestMagnitudeIgnoresRopeScaling: magnitude pruning, which reads only the weights, prunes
// a model with Llama 3's rope scaling (a shrunken synth llama-3.2-1b) to 2:4, while Wanda,
// whose calibration runs the model, still refuses it.
func TestMagnitudeIgnoresRopeScaling(t *testing.T) {
	shape, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	c := &shape.Config
	c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.RopeDim, c.FFNDim, c.Layers, c.VocabSize = 64, 1, 1, 64, 64, 128, 1, 320
	m, err := synth.Model(shape, quant.BF16, 9)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out := filepath.Join(t.TempDir(), "out.gguf")
	if err := Prune(m, out, Options{Method: "wanda", Pattern: Pattern{2, 4}, Calibration: [][]int32{{1, 2, 3, 4}}}); err == nil || !strings.Contains(err.Error(), "rope scaling") {
		t.Errorf("wanda on a llama3-scaled model: %v, want the rope scaling refused", err)
	}
	if err := Prune(m, out, Options{Method: "magnitude", Pattern: Pattern{2, 4}}); err != nil {
		t.Fatal(err)
	}
	pm, err := format.Open(out, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Close()
	d, err := calibrate.Load(pm, "blk.0.ffn_up.weight")
	if err != nil {
		t.Fatal(err)
	}
	for g := 0; g < len(d.Data); g += 4 {
		zeros := 0
		for _, v := range d.Data[g : g+4] {
			if v == 0 {
				zeros++
			}
		}
		if zeros < 2 {
			t.Fatalf("group %d of ffn_up has %d zeros", g/4, zeros)
		}
	}
}
