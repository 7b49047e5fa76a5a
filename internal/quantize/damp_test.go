package quantize

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/perplexity"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

func TestSplitWindows(t *testing.T) {
	ws := make([][]int32, 8)
	for i := range ws {
		ws[i] = []int32{int32(i)}
	}
	fit, held, err := SplitWindows(ws)
	if err != nil || len(fit) != 6 || len(held) != 2 || held[0][0] != 3 || held[1][0] != 7 {
		t.Fatalf("8 windows: fit %v, held %v, err %v", fit, held, err)
	}
	fit, held, err = SplitWindows(ws[:3])
	if err != nil || len(fit) != 2 || len(held) != 1 || held[0][0] != 2 {
		t.Fatalf("3 windows: fit %v, held %v, err %v", fit, held, err)
	}
	if _, _, err := SplitWindows(ws[:1]); err == nil || !strings.Contains(err.Error(), "at least 2 calibration windows") {
		t.Fatalf("1 window: err %v", err)
	}
}

// calibrationWindows returns n windows of 32 tokens of the tiny model's vocabulary.
func calibrationWindows(n int) [][]int32 {
	ws := make([][]int32, n)
	for w := range ws {
		ws[w] = make([]int32, 32)
		for i := range ws[w] {
			ws[w][i] = int32(1 + (i*37+w*101+i*i*w)%299)
		}
	}
	return ws
}

// TestHeldOutPerplexity checks the held-out score ChooseDamp ranks dampings by against
// the reference forward pass of the unquantized model (every token after a window's
// first scored).
func TestHeldOutPerplexity(t *testing.T) {
	m := tinyModel(t)
	p := cpu.NewPool(2)
	defer p.Close()
	held := calibrationWindows(2)
	x, err := calibrate.Run(m, held, p, func(l int) (*calibrate.Layer, error) { return calibrate.LoadLayer(m, l) },
		func(*calibrate.Stage) error { return nil }, func(int, *calibrate.Layer) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	got, err := heldOutPerplexity(m, p, x, held, map[string]quant.Type{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := model.NewReference(m)
	if err != nil {
		t.Fatal(err)
	}
	var nll float64
	var n int
	logp := make([]float64, m.Config.VocabSize)
	for _, w := range held {
		ref.Reset()
		for i, tok := range w[:len(w)-1] {
			logits, err := ref.Forward(int(tok))
			if err != nil {
				t.Fatal(err)
			}
			perplexity.LogSoftmax(logits, logp)
			nll -= logp[w[i+1]]
			n++
		}
	}
	want := math.Exp(nll / float64(n))
	if math.Abs(got/want-1) > 1e-4 {
		t.Fatalf("held-out perplexity %g, the reference model's %g", got, want)
	}
}

// TestChooseDamp checks that the damping chosen is the grid's of least held-out
// perplexity, that every damping was scored, and that the model is left as it was.
func TestChooseDamp(t *testing.T) {
	m := tinyModel(t)
	p := cpu.NewPool(2)
	defer p.Close()
	before := map[string][]byte{}
	for _, tt := range m.Tensors {
		before[tt.Name] = bytes.Clone(tt.Data)
	}
	plan, _ := ParsePlan("q4_0")
	types := map[string]quant.Type{}
	for _, tt := range m.Tensors {
		types[tt.Name] = plan.TypeFor(tt.Name, tt.Shape, m.Config.Layers, false)
	}
	damp, ppl, err := ChooseDamp(m, p, calibrationWindows(4), types, GPTQOptions{}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("damp %g, held-out perplexities %v", damp, ppl)
	least := 0
	for k, v := range ppl {
		if !(v > 1) || math.IsInf(v, 0) {
			t.Fatalf("damp %g: held-out perplexity %g", DampGrid[k], v)
		}
		if v < ppl[least] {
			least = k
		}
	}
	if damp != DampGrid[least] {
		t.Fatalf("chose %g, the least perplexity is %g's", damp, DampGrid[least])
	}
	for _, tt := range m.Tensors {
		if !bytes.Equal(tt.Data, before[tt.Name]) {
			t.Fatalf("%s changed", tt.Name)
		}
	}
}
