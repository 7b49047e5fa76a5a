package model

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// TestForwardHiddenProjectsToLogits: the hidden states ForwardHidden returns, projected
// onto the vocabulary by the output weight on the host, are the logits Forward returns for
// the same rows, whole and split over two tensor-parallel ranks.
func TestForwardHiddenProjectsToLogits(t *testing.T) {
	s, err := synth.Lookup("qwen3-0.6b")
	if err != nil {
		t.Fatal(err)
	}
	fm := writeTwin(t, smallConfig(s.Config), quant.F32, synth.GGUF)
	c := fm.Config
	name := "output.weight"
	if c.TiedEmbeddings {
		name = "token_embd.weight"
	}
	var wt *format.Tensor
	for _, ft := range fm.Tensors {
		if ft.Name == name {
			wt = ft
		}
	}
	if wt == nil {
		t.Fatalf("no %s", name)
	}
	w := make([]float32, wt.Elements())
	if err := quant.Dequantize(wt.Type, wt.Data, w); err != nil {
		t.Fatal(err)
	}
	seqs := []seqRun{{prompt: testTokens(21), table: []int32{0, 1}}, {prompt: testTokens(5)[1:], table: []int32{2}}}
	for _, par := range []Parallel{{}, {Tensor: 2}} {
		m, err := New(fm, Options{Backends: cpuBackends(t, 2, par), Parallel: par})
		if err != nil {
			t.Fatal(err)
		}
		kv, err := m.NewKVCache(4, 16)
		if err != nil {
			t.Fatal(err)
		}
		b := batchFor(seqs, []int{0, 0}, []int{21, 4}, 16)
		b.LogitsIndices = []int{20, 24} // each sequence's last token
		hidden, err := m.ForwardHidden(b, kv)
		if err != nil {
			t.Fatal(err)
		}
		logits, err := m.Forward(b, kv)
		if err != nil {
			t.Fatal(err)
		}
		proj := make([]float32, len(logits))
		for r := range 2 {
			h := hidden[r*c.Dim : (r+1)*c.Dim]
			for v := range c.VocabSize {
				var sum float64
				for i, x := range h {
					sum += float64(x) * float64(w[v*c.Dim+i])
				}
				proj[r*c.VocabSize+v] = float32(sum)
			}
		}
		if d := maxAbsDiff(proj, logits); d > 1e-5 {
			t.Errorf("parallel %+v: hidden states projected differ from the logits by %.2g (relative)", par, d)
		}
		m.Close()
	}
}
