package quantize

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestChooseDampHeldOut checks ChooseDamp's measure and its use. Each damping's error is
// recomputed plainly (GPTQ on the Hessian of the windows 0-2, 4-6, the error on windows 3
// and 7); the damping returned is the least of them; the stage's weights are untouched.
// With few calibration rows for the layer's width, little damping fits the noise of the
// fit windows: the damping chosen must change the outputs on fresh inputs less than the
// grid's least damping does.
func TestChooseDampHeldOut(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	p := cpu.NewPool(2)
	defer p.Close()
	const cols, seq = 256, 80
	// The stage's 8 windows, then fresh inputs of the same distribution.
	all := correlatedInputs(rng, 8*seq+4096, cols)
	x := &calibrate.Dense{Rows: 8 * seq, Cols: cols, Data: all.Data[:8*seq*cols]}
	fresh := &calibrate.Dense{Rows: 4096, Cols: cols, Data: all.Data[8*seq*cols:]}
	ws := []*calibrate.Dense{randomWeights(rng, 32, cols), randomWeights(rng, 16, cols)}
	w0 := []*calibrate.Dense{clone(ws[0]), clone(ws[1])}
	st := &calibrate.Stage{Kind: calibrate.FFNInput, Input: x, Tokens: x.Rows, Linear: ws, SeqLen: seq}
	types := []quant.Type{quant.Q4_0, quant.Q4_K}
	damp, errs, err := ChooseDamp(p, st, types, GPTQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("damp %g, held-out errors %v", damp, errs)
	for i, w := range ws {
		if !slices.Equal(w.Data, w0[i].Data) {
			t.Fatalf("ChooseDamp changed linear %d's weights", i)
		}
	}
	fit := &calibrate.Dense{Cols: cols}
	held := &calibrate.Dense{Cols: cols}
	for w := range 8 {
		d := fit
		if w == 3 || w == 7 {
			d = held
		}
		d.Data = append(d.Data, x.Data[w*seq*cols:(w+1)*seq*cols]...)
		d.Rows += seq
	}
	h, err := Hessian(p, fit)
	if err != nil {
		t.Fatal(err)
	}
	least := 0
	for k, d := range DampGrid {
		prep, err := Prepare(h, cols, GPTQOptions{Damp: d})
		if err != nil {
			t.Fatal(err)
		}
		var want float64
		for i, w := range w0 {
			q := clone(w)
			if _, err := GPTQ(q, prep, types[i]); err != nil {
				t.Fatal(err)
			}
			want += outputError(held, w, q)
		}
		if math.Abs(errs[k]-want) > 1e-3*want {
			t.Fatalf("damp %g: held-out error %g, plainly %g", d, errs[k], want)
		}
		if errs[k] < errs[least] {
			least = k
		}
	}
	if damp != DampGrid[least] {
		t.Fatalf("chose %g, the least held-out error is %g's", damp, DampGrid[least])
	}
	// On the fresh inputs: the chosen damping against the least.
	freshErr := func(d float64) float64 {
		prep, err := Prepare(h, cols, GPTQOptions{Damp: d})
		if err != nil {
			t.Fatal(err)
		}
		var e float64
		for i, w := range w0 {
			q := clone(w)
			if _, err := GPTQ(q, prep, types[i]); err != nil {
				t.Fatal(err)
			}
			e += outputError(fresh, w, q)
		}
		return e
	}
	chosen, smallest := freshErr(damp), freshErr(DampGrid[0])
	t.Logf("fresh inputs: damp %g error %.4g, damp %g error %.4g", damp, chosen, DampGrid[0], smallest)
	if damp == DampGrid[0] || !(chosen < smallest) {
		t.Fatalf("damp %g (fresh error %g) does not beat damp %g (%g) with %d fit rows for %d columns", damp, chosen, DampGrid[0], smallest, fit.Rows, cols)
	}
}

// TestChooseDampNeedsTwoWindows checks the refusal of a stage of one window.
func TestChooseDampNeedsTwoWindows(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := cpu.NewPool(1)
	defer p.Close()
	x := correlatedInputs(rng, 64, 32)
	st := &calibrate.Stage{Kind: calibrate.FFNInput, Input: x, Tokens: 64, Linear: []*calibrate.Dense{randomWeights(rng, 8, 32)}, SeqLen: 64}
	_, _, err := ChooseDamp(p, st, []quant.Type{quant.Q4_0}, GPTQOptions{})
	if err == nil || !strings.Contains(err.Error(), "at least 2 calibration windows") {
		t.Fatalf("one window: err %v", err)
	}
	st.SeqLen = 0
	if _, _, err := ChooseDamp(p, st, []quant.Type{quant.Q4_0}, GPTQOptions{}); err == nil {
		t.Fatal("a stage without a window length: no error")
	}
}
