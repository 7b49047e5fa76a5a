package quantize

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

func clone(d *calibrate.Dense) *calibrate.Dense {
	return &calibrate.Dense{Name: d.Name, Rows: d.Rows, Cols: d.Cols, Data: slices.Clone(d.Data)}
}

func product(t *testing.T, p *cpu.Pool, x, w *calibrate.Dense) []float32 {
	out := make([]float32, x.Rows*w.Rows)
	if err := calibrate.MatMul(p, out, w, x.Data, x.Rows); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAWQNormStage checks AWQ on a stage read after a norm: the folded layer computes the
// same outputs from the rescaled input, the norm weight carries the inverse scales, and
// the quantized outputs are closer to the float ones than round-to-nearest gets them.
func TestAWQNormStage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	p := cpu.NewPool(2)
	defer p.Close()
	x := correlatedInputs(rng, 512, 128)
	norm := &calibrate.Dense{Name: "norm", Rows: 1, Cols: 128, Data: make([]float32, 128)}
	for i := range norm.Data {
		norm.Data[i] = float32(0.5 + rng.Float64())
	}
	ws := []*calibrate.Dense{randomWeights(rng, 64, 128), randomWeights(rng, 32, 128)}
	x0, n0 := clone(x), clone(norm)
	w0 := []*calibrate.Dense{clone(ws[0]), clone(ws[1])}
	st := &calibrate.Stage{Kind: calibrate.AttnInput, Input: x, Tokens: x.Rows, Linear: ws, Norm: norm}
	types := []quant.Type{quant.Q4_0, quant.Q4_0}
	alpha, err := AWQ(p, st, types, AWQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("alpha %.2f", alpha)
	if alpha == 0 {
		t.Fatal("AWQ chose no scaling on inputs with salient channels")
	}
	var awqErr, rtnErr float64
	for i, w := range ws {
		want, got := product(t, p, x0, w0[i]), product(t, p, x, w)
		for j := range want {
			if math.Abs(float64(want[j]-got[j])) > 1e-3*(1+math.Abs(float64(want[j]))) {
				t.Fatalf("linear %d output %d: %g after folding, %g before", i, j, got[j], want[j])
			}
		}
		// The scales: x0/x per column equals norm0/norm.
		for c := range 128 {
			s := x0.Data[c] / x.Data[c]
			if r := n0.Data[c] / norm.Data[c]; math.Abs(float64(s/r-1)) > 1e-4 {
				t.Fatalf("column %d: input scaled by %g, norm by %g", c, s, r)
			}
		}
		q := clone(w)
		if err := quantDequant(quant.Q4_0, q.Data); err != nil {
			t.Fatal(err)
		}
		awqErr += outputError(x, w, q)
		rtnErr += outputError(x0, w0[i], rtn(t, w0[i], quant.Q4_0))
	}
	t.Logf("output error AWQ %.4g, RTN %.4g", awqErr, rtnErr)
	if !(awqErr < rtnErr) {
		t.Fatalf("AWQ output error %g not below RTN's %g", awqErr, rtnErr)
	}
}

// TestAWQGroupedOutputStage checks the o projection under grouped-query attention: the
// heads of a group share their scales, which the value rows carry inverted, so that
// o(att) is unchanged and v's rows divided by the scale o's columns were multiplied by.
func TestAWQGroupedOutputStage(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	p := cpu.NewPool(2)
	defer p.Close()
	const hd, heads, group, dim = 16, 4, 2, 64
	kvDim := heads / group * hd
	att := correlatedInputs(rng, 256, heads*hd)
	o := randomWeights(rng, dim, heads*hd)
	v := randomWeights(rng, kvDim, dim)
	bias := &calibrate.Dense{Rows: 1, Cols: kvDim, Data: make([]float32, kvDim)}
	for i := range bias.Data {
		bias.Data[i] = 1
	}
	att0, o0, v0 := clone(att), clone(o), clone(v)
	st := &calibrate.Stage{Kind: calibrate.AttnOutput, Input: att, Tokens: att.Rows, Linear: []*calibrate.Dense{o},
		Producer: v, ProducerBias: bias, KVGroup: group, HeadDim: hd}
	if _, err := AWQ(p, st, []quant.Type{quant.Q4_0}, AWQOptions{}); err != nil {
		t.Fatal(err)
	}
	want, got := product(t, p, att0, o0), product(t, p, att, o)
	for j := range want {
		if math.Abs(float64(want[j]-got[j])) > 1e-3*(1+math.Abs(float64(want[j]))) {
			t.Fatalf("output %d: %g after folding, %g before", j, got[j], want[j])
		}
	}
	for c := range heads * hd {
		s := o.Data[c] / o0.Data[c]
		k := (c/hd/group)*hd + c%hd
		if r := v0.Data[k*dim] / v.Data[k*dim]; math.Abs(float64(s/r-1)) > 1e-4 {
			t.Fatalf("column %d: o scaled by %g, value row %d divided by %g", c, s, k, r)
		}
		if r := 1 / bias.Data[k]; math.Abs(float64(s/r-1)) > 1e-4 {
			t.Fatalf("column %d: o scaled by %g, value bias %d divided by %g", c, s, k, r)
		}
	}
}

// TestAWQClipLowersHeldOutError checks the clipping step on a stage read after a norm: q
// and k are left as they are, v's and the other layers' blocks are clipped, and the
// clipped layers' quantized outputs on inputs held apart from the search are closer to
// the unclipped float ones than those of the unclipped weights quantized.
func TestAWQClipLowersHeldOutError(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	p := cpu.NewPool(2)
	defer p.Close()
	x, held := searchAndHeld(rng)
	ws := []*calibrate.Dense{randomWeights(rng, 32, 128), randomWeights(rng, 32, 128), randomWeights(rng, 64, 128)}
	// Heavy tails: a few large weights per row, which a clipped range rounds better.
	for _, w := range ws {
		for i := range w.Data {
			if rng.IntN(40) == 0 {
				w.Data[i] *= 6
			}
		}
	}
	w0 := []*calibrate.Dense{clone(ws[0]), clone(ws[1]), clone(ws[2])}
	st := &calibrate.Stage{Kind: calibrate.AttnInput, Input: x, Tokens: x.Rows, Linear: ws}
	types := []quant.Type{quant.Q4_0, quant.Q4_0, quant.Q4_0}
	frac, err := AWQClip(p, st, types, AWQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.0f%% of blocks clipped", 100*frac)
	for i := range 2 {
		if !slices.Equal(ws[i].Data, w0[i].Data) {
			t.Fatalf("linear %d (q or k) was clipped", i)
		}
	}
	if slices.Equal(ws[2].Data, w0[2].Data) {
		t.Fatal("v was not clipped")
	}
	for i, v := range ws[2].Data {
		if math.Abs(float64(v)) > math.Abs(float64(w0[2].Data[i])) {
			t.Fatalf("element %d grew from %g to %g", i, w0[2].Data[i], v)
		}
	}
	clipped, plain := clone(ws[2]), clone(w0[2])
	for _, d := range []*calibrate.Dense{clipped, plain} {
		if err := quantDequant(quant.Q4_0, d.Data); err != nil {
			t.Fatal(err)
		}
	}
	got, base := outputError(held, w0[2], clipped), outputError(held, w0[2], plain)
	t.Logf("held-out output error: clipped %.4g, unclipped %.4g", got, base)
	if !(got < base) {
		t.Fatalf("clipping raised the held-out output error: %g, unclipped %g", got, base)
	}
}

// TestSampleRowsDoesNotAlias checks that the rows AWQ measures on are distinct and take
// the first token of each calibration window at about its share, not at the stride's.
func TestSampleRowsDoesNotAlias(t *testing.T) {
	const tokens, window = 8192, 512
	in := &calibrate.Dense{Rows: tokens, Cols: 1, Data: make([]float32, tokens)}
	for i := range in.Data {
		in.Data[i] = float32(i)
	}
	xs, _ := sampleRows(in, tokens, 1024, nil)
	seen := map[float32]bool{}
	first := 0
	for _, v := range xs.Data {
		if seen[v] {
			t.Fatalf("row %g taken twice", v)
		}
		seen[v] = true
		if int(v)%window == 0 {
			first++
		}
	}
	if len(seen) != 1024 {
		t.Fatalf("%d rows, want 1024", len(seen))
	}
	if want := 1024 / window; first > 2*want {
		t.Fatalf("%d first-of-window rows of 1024, want about %d", first, want)
	}
	if all, _ := sampleRows(in, 100, 1024, nil); all.Rows != 100 {
		t.Fatalf("%d rows of 100 tokens, want all 100", all.Rows)
	}
}

// weightsOf returns a Stage.TokenWeight giving w.
func weightsOf(w []float32) func() ([]float32, error) {
	return func() ([]float32, error) { return w, nil }
}

// TestAWQTokenWeights checks that AWQ's scale search, TokenWeighted, weighs each token's
// error by the stage's TokenWeight: on a feed-forward stage, negating the inputs of tokens of weight
// 0 (which leaves the channels' mean magnitudes as they are, but not silu's outputs)
// changes nothing AWQ chooses, while unweighted (the default) it changes the choice.
func TestAWQTokenWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	p := cpu.NewPool(2)
	defer p.Close()
	const tokens, dim, ffn = 256, 64, 96
	x := correlatedInputs(rng, tokens, dim)
	w := make([]float32, tokens)
	for i := range tokens {
		if i%2 == 0 {
			w[i] = 2
		} else { // weight 0, and large: what the unweighted error would follow
			for c := range x.Row(i) {
				x.Row(i)[c] *= 6
			}
		}
	}
	neg := clone(x)
	for i := 1; i < tokens; i += 2 {
		for c := range neg.Row(i) {
			neg.Row(i)[c] = -neg.Row(i)[c]
		}
	}
	norm := &calibrate.Dense{Name: "norm", Rows: 1, Cols: dim, Data: make([]float32, dim)}
	for i := range norm.Data {
		norm.Data[i] = 1
	}
	gate, up, down := randomWeights(rng, ffn, dim), randomWeights(rng, ffn, dim), randomWeights(rng, dim, ffn)
	run := func(in *calibrate.Dense, opt AWQOptions) (float64, []float32) {
		st := &calibrate.Stage{Kind: calibrate.FFNInput, Input: clone(in), Tokens: tokens, Norm: clone(norm),
			Linear: []*calibrate.Dense{clone(gate), clone(up)}, Down: down, TokenWeight: weightsOf(w)}
		alpha, err := AWQ(p, st, []quant.Type{quant.Q4_0, quant.Q4_0}, opt)
		if err != nil {
			t.Fatal(err)
		}
		return alpha, st.Norm.Data
	}
	a1, n1 := run(x, AWQOptions{TokenWeighted: true})
	a2, n2 := run(neg, AWQOptions{TokenWeighted: true})
	t.Logf("weighted: alpha %.2f, %.2f with the weight-0 tokens negated", a1, a2)
	if !slices.Equal(n1, n2) {
		t.Fatal("tokens of weight 0 changed the scales AWQ chose")
	}
	u1, m1 := run(x, AWQOptions{})
	u2, m2 := run(neg, AWQOptions{})
	t.Logf("unweighted: alpha %.2f, %.2f with them negated", u1, u2)
	if slices.Equal(m1, m2) {
		t.Fatal("unweighted, the negated tokens changed nothing either: the test shows nothing")
	}
}

// TestAWQClipTokenWeights checks that the clipping search, TokenWeighted, weighs tokens
// as their TokenWeight says: weights of 0, 1 and 4 choose the ranges that the same rows
// taken 0, 1 and 4 times choose (up to the float rounding of the two sums); without
// TokenWeighted the weights are ignored.
func TestAWQClipTokenWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	p := cpu.NewPool(2)
	defer p.Close()
	const tokens, dim = 300, 128
	x := correlatedInputs(rng, tokens, dim)
	w := make([]float32, tokens)
	var rep []float32
	for i := range tokens {
		w[i] = []float32{0, 1, 4}[i%3]
		for range int(w[i]) {
			rep = append(rep, x.Row(i)...)
		}
	}
	xr := &calibrate.Dense{Rows: len(rep) / dim, Cols: dim, Data: rep}
	v := randomWeights(rng, 64, dim)
	for i := range v.Data {
		if rng.IntN(40) == 0 {
			v.Data[i] *= 6
		}
	}
	clip := func(st *calibrate.Stage, weighted bool) []float32 {
		st.Kind, st.Linear = calibrate.FFNOutput, []*calibrate.Dense{clone(v)}
		if _, err := AWQClip(p, st, []quant.Type{quant.Q4_0}, AWQOptions{MaxTokens: 1 << 20, TokenWeighted: weighted}); err != nil {
			t.Fatal(err)
		}
		return st.Linear[0].Data
	}
	weighted := clip(&calibrate.Stage{Input: x, Tokens: tokens, TokenWeight: weightsOf(w)}, true)
	repeated := clip(&calibrate.Stage{Input: xr, Tokens: xr.Rows}, true)
	plain := clip(&calibrate.Stage{Input: x, Tokens: tokens, TokenWeight: weightsOf(w)}, false)
	differ := func(a, b []float32) int {
		n := 0
		for i := 0; i < len(a); i += quant.QK {
			if !slices.Equal(a[i:i+quant.QK], b[i:i+quant.QK]) {
				n++
			}
		}
		return n
	}
	blocks := len(v.Data) / quant.QK
	d, u := differ(weighted, repeated), differ(plain, repeated)
	t.Logf("of %d blocks, %d clipped otherwise than the repeated rows clip them weighted, %d unweighted", blocks, d, u)
	if d > blocks/50 {
		t.Fatalf("weighted: %d of %d blocks clipped otherwise than with repeated rows", d, blocks)
	}
	if u <= d {
		t.Fatalf("unweighted clipping agrees with the repeated rows as well (%d blocks differ) as weighted (%d): the test shows nothing", u, d)
	}
}

// TestAWQNoScales checks that NoScales leaves a stage's weights, norm and input as they
// are.
func TestAWQNoScales(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	p := cpu.NewPool(2)
	defer p.Close()
	x := correlatedInputs(rng, 256, 64)
	norm := &calibrate.Dense{Name: "norm", Rows: 1, Cols: 64, Data: make([]float32, 64)}
	for i := range norm.Data {
		norm.Data[i] = 1
	}
	w := randomWeights(rng, 32, 64)
	st := &calibrate.Stage{Kind: calibrate.AttnOutput, Input: clone(x), Tokens: x.Rows, Linear: []*calibrate.Dense{clone(w)}, Norm: clone(norm)}
	alpha, err := AWQ(p, st, []quant.Type{quant.Q4_0}, AWQOptions{NoScales: true})
	if err != nil {
		t.Fatal(err)
	}
	if alpha != 0 || !slices.Equal(st.Input.Data, x.Data) || !slices.Equal(st.Linear[0].Data, w.Data) || !slices.Equal(st.Norm.Data, norm.Data) {
		t.Fatal("NoScales changed the stage")
	}
	if _, err := AWQ(p, st, []quant.Type{quant.Q4_0}, AWQOptions{}); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(st.Norm.Data, norm.Data) {
		t.Fatal("without NoScales the stage is unchanged too: the test shows nothing")
	}
}

// TestAWQClipEnds checks the two-ended clipping search on a grid with a min (q4_1): on
// blocks whose tails differ in length on the two sides of 0 it clamps the shorter side's
// end too (which the symmetric ranges, set by the longer side, cannot reach), raises no
// element's magnitude, and lowers the output error on inputs held apart from the search
// below the unclipped weights'; on q4_0, whose blocks have no min, it is the symmetric
// search, weight for weight.
func TestAWQClipEnds(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	p := cpu.NewPool(2)
	defer p.Close()
	x, held := searchAndHeld(rng)
	w := randomWeights(rng, 64, 128)
	// Heavy tails, longer above 0 than below.
	for i := range w.Data {
		switch rng.IntN(30) {
		case 0:
			w.Data[i] = float32(math.Abs(float64(w.Data[i]))) * 8
		case 1:
			w.Data[i] = -float32(math.Abs(float64(w.Data[i]))) * 4
		}
	}
	clip := func(typ quant.Type, ends bool) *calibrate.Dense {
		v := clone(w)
		st := &calibrate.Stage{Kind: calibrate.FFNOutput, Input: x, Tokens: x.Rows, Linear: []*calibrate.Dense{v}}
		frac, err := AWQClip(p, st, []quant.Type{typ}, AWQOptions{SymmetricClip: !ends})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s ends %v: %.0f%% of blocks clipped", typ, ends, 100*frac)
		return v
	}
	sym, ends := clip(quant.Q4_1, false), clip(quant.Q4_1, true)
	// Blocks where the two-ended search clamped the side whose end is the smaller.
	short := 0
	for b := 0; b < len(w.Data); b += quant.QK {
		var pos, neg float32
		for _, v := range w.Data[b : b+quant.QK] {
			pos, neg = max(pos, v), max(neg, -v)
		}
		for j, v := range w.Data[b : b+quant.QK] {
			if ends.Data[b+j] != v && (v > 0) == (pos < neg) {
				short++
				break
			}
		}
	}
	if short == 0 {
		t.Fatal("the two-ended search never clamped a block's shorter side")
	}
	for i, v := range ends.Data {
		if math.Abs(float64(v)) > math.Abs(float64(w.Data[i])) {
			t.Fatalf("element %d grew from %g to %g", i, w.Data[i], v)
		}
	}
	errOf := func(c *calibrate.Dense) float64 {
		q := clone(c)
		if err := quantDequant(quant.Q4_1, q.Data); err != nil {
			t.Fatal(err)
		}
		return outputError(held, w, q)
	}
	e0, eSym, eEnds := errOf(w), errOf(sym), errOf(ends)
	t.Logf("q4_1 held-out output error: unclipped %.4g, symmetric %.4g, two ends %.4g (%d blocks clamped on their shorter side)", e0, eSym, eEnds, short)
	if !(eEnds < e0) {
		t.Fatalf("the two-ended clipping raised the held-out output error: %g, unclipped %g", eEnds, e0)
	}
	if !slices.Equal(clip(quant.Q4_0, true).Data, clip(quant.Q4_0, false).Data) {
		t.Fatal("on q4_0 the two-ended search differs from the symmetric one")
	}
}

// searchAndHeld returns 512 correlated inputs of 128 values for a search and 512 more from
// the same distribution held apart from it.
func searchAndHeld(rng *rand.Rand) (x, held *calibrate.Dense) {
	all := correlatedInputs(rng, 1024, 128)
	return &calibrate.Dense{Rows: 512, Cols: 128, Data: all.Data[:512*128]},
		&calibrate.Dense{Rows: 512, Cols: 128, Data: all.Data[512*128:]}
}
