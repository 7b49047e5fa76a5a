package calibrate

import (
	"math"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

func openStories(t *testing.T) *format.Model {
	t.Helper()
	m, err := format.Open(testdata.Path(t, "models/stories260K/stories260K.gguf"), format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestRunMatchesReference checks the layer-by-layer pass against the model package's
// reference forward pass: the final residual stream, normed and projected, gives the
// reference's logits at every position of two sequences; and the visitor sees the four
// stages of every layer in order, with inputs of the right shape.
func TestRunMatchesReference(t *testing.T) {
	m := openStories(t)
	c := m.Config
	seqs := [][]int32{{1, 403, 407, 261, 378, 425, 375, 302}, {1, 415, 443, 332, 260, 384, 290, 267}}
	var seen []StageKind
	p := cpu.NewPool(2)
	defer p.Close()
	x, err := Run(m, seqs, p, func(l int) (*Layer, error) { return LoadLayer(m, l) },
		func(s *Stage) error {
			seen = append(seen, s.Kind)
			if s.Input.Rows != 16 || s.Input.Cols != s.Linear[0].Cols {
				t.Errorf("layer %d %s: input %dx%d for a weight of %d columns", s.Layer, s.Kind, s.Input.Rows, s.Input.Cols, s.Linear[0].Cols)
			}
			return nil
		}, func(int, *Layer) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 4*c.Layers || seen[0] != AttnInput || seen[1] != AttnOutput || seen[2] != FFNInput || seen[3] != FFNOutput {
		t.Fatalf("stages %v", seen)
	}
	norm, err := Load(m, "output_norm.weight")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Load(m, "output.weight")
	if err != nil {
		out, err = Load(m, "token_embd.weight")
		if err != nil {
			t.Fatal(err)
		}
	}
	ref, err := model.NewReference(m)
	if err != nil {
		t.Fatal(err)
	}
	for s, seq := range seqs {
		ref.Reset()
		for i, tok := range seq {
			want, err := ref.Forward(int(tok))
			if err != nil {
				t.Fatal(err)
			}
			row := x[(s*len(seq)+i)*c.Dim:][:c.Dim]
			var ss float64
			for _, v := range row {
				ss += float64(v) * float64(v)
			}
			inv := 1 / math.Sqrt(ss/float64(c.Dim)+c.NormEps)
			for j := range want {
				var d float64
				for e, v := range row {
					d += float64(v) * inv * float64(norm.Data[e]) * float64(out.Row(j)[e])
				}
				if math.Abs(d-float64(want[j])) > 2e-3 {
					t.Fatalf("sequence %d position %d logit %d: %g, reference %g", s, i, j, d, want[j])
				}
			}
		}
	}
}

func TestRunRefuses(t *testing.T) {
	m := openStories(t)
	p := cpu.NewPool(1)
	defer p.Close()
	load := func(l int) (*Layer, error) { return LoadLayer(m, l) }
	nop := func(*Stage) error { return nil }
	done := func(int, *Layer) error { return nil }
	if _, err := Run(m, nil, p, load, nop, done); err == nil {
		t.Error("no sequences: no error")
	}
	if _, err := Run(m, [][]int32{{1, 2}, {1}}, p, load, nop, done); err == nil {
		t.Error("sequences of two lengths: no error")
	}
	if _, err := Run(m, [][]int32{{1, 100000}}, p, load, nop, done); err == nil {
		t.Error("a token outside the vocabulary: no error")
	}
	c := m.Config
	c.Experts = 4
	if err := Check(c); err == nil {
		t.Error("a mixture of experts passed Check")
	}
}

func TestChunks(t *testing.T) {
	tokens := []int32{5, 6, 7, 8, 9, 10, 11}
	got := Chunks(tokens, 3, 1, 0)
	if len(got) != 2 || got[0][0] != 1 || got[0][1] != 6 || got[1][0] != 1 || got[1][2] != 10 || tokens[3] != 8 {
		t.Fatalf("Chunks: %v (tokens now %v)", got, tokens)
	}
	if got := Chunks(tokens, 3, -1, 5); len(got) != 1 || got[0][0] != 5 {
		t.Fatalf("Chunks without BOS, at most 5 tokens: %v", got)
	}
}

// TestStageBlocks checks the block outputs a stage offers its visitor: Attention on the
// first sequence's attention input gives o of the attention output the run computes for
// it, and Down is the layer's down projection; and Attention refuses rows that are not
// whole sequences.
func TestStageBlocks(t *testing.T) {
	m := openStories(t)
	c := m.Config
	seqs := [][]int32{{1, 403, 407, 261, 378, 425, 375, 302}, {1, 415, 443, 332, 260, 384, 290, 267}}
	p := cpu.NewPool(2)
	defer p.Close()
	var want []float32
	checked := 0
	_, err := Run(m, seqs, p, func(l int) (*Layer, error) { return LoadLayer(m, l) },
		func(s *Stage) error {
			switch s.Kind {
			case AttnInput:
				if s.SeqLen != 8 {
					t.Fatalf("SeqLen %d, want 8", s.SeqLen)
				}
				var err error
				if want, err = s.Attention(s.Input.Data[:8*c.Dim], s.Linear[0], s.Linear[1], s.Linear[2]); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Attention(s.Input.Data[:5*c.Dim], s.Linear[0], s.Linear[1], s.Linear[2]); err == nil {
					t.Fatal("attention over 5 rows of sequences of 8: no error")
				}
			case AttnOutput:
				got := make([]float32, 8*c.Dim)
				if err := MatMul(p, got, s.Linear[0], s.Input.Data[:8*s.Input.Cols], 8); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if math.Abs(float64(got[i]-want[i])) > 1e-5*(1+math.Abs(float64(got[i]))) {
						t.Fatalf("layer %d output %d: %g from Attention, %g from the run", s.Layer, i, want[i], got[i])
					}
				}
				checked++
			case FFNInput:
				if s.Down == nil || s.Down.Name != "blk."+string(rune('0'+s.Layer))+".ffn_down.weight" {
					t.Fatalf("layer %d: Down is %v", s.Layer, s.Down)
				}
			}
			return nil
		}, func(int, *Layer) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if checked != c.Layers {
		t.Fatalf("checked %d layers of %d", checked, c.Layers)
	}
}

// TestTokenWeights checks each stage's TokenWeight: a weight per token with a mean of 1,
// the same for a block's two stages, and, for the last feed-forward block (whose output
// the residual stream Run returns holds), proportional to 1/(ms + eps) of that stream's
// rows.
func TestTokenWeights(t *testing.T) {
	m := openStories(t)
	c := m.Config
	seqs := [][]int32{{1, 403, 407, 261, 378, 425, 375, 302}, {1, 415, 443, 332, 260, 384, 290, 267}}
	p := cpu.NewPool(2)
	defer p.Close()
	got := map[[2]int][]float32{}
	x, err := Run(m, seqs, p, func(l int) (*Layer, error) { return LoadLayer(m, l) },
		func(s *Stage) error {
			w, err := s.TokenWeight()
			if err != nil {
				return err
			}
			if len(w) != s.Tokens {
				t.Fatalf("layer %d %s: %d weights for %d tokens", s.Layer, s.Kind, len(w), s.Tokens)
			}
			var sum float64
			for _, v := range w {
				if !(v > 0) {
					t.Fatalf("layer %d %s: weight %g", s.Layer, s.Kind, v)
				}
				sum += float64(v)
			}
			if mean := sum / float64(len(w)); math.Abs(mean-1) > 1e-4 {
				t.Fatalf("layer %d %s: mean weight %g, want 1", s.Layer, s.Kind, mean)
			}
			got[[2]int{s.Layer, int(s.Kind)}] = w
			return nil
		}, func(int, *Layer) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	for l := range c.Layers {
		a, o := got[[2]int{l, int(AttnInput)}], got[[2]int{l, int(AttnOutput)}]
		f, d := got[[2]int{l, int(FFNInput)}], got[[2]int{l, int(FFNOutput)}]
		for i := range a {
			if a[i] != o[i] || f[i] != d[i] {
				t.Fatalf("layer %d token %d: the block's two stages weigh it %g and %g (attention), %g and %g (feed-forward)", l, i, a[i], o[i], f[i], d[i])
			}
		}
	}
	last := got[[2]int{c.Layers - 1, int(FFNOutput)}]
	n := len(last)
	var ratio0 float64
	for i := range n {
		var ms float64
		for _, v := range x[i*c.Dim : (i+1)*c.Dim] {
			ms += float64(v) * float64(v)
		}
		r := float64(last[i]) * (ms/float64(c.Dim) + c.NormEps)
		if i == 0 {
			ratio0 = r
		}
		if math.Abs(r/ratio0-1) > 1e-3 {
			t.Fatalf("token %d: weight times ms %g, token 0's %g: want the weight proportional to 1/ms", i, r, ratio0)
		}
	}
}
