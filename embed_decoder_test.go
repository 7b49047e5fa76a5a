package kvasir

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// writeDecoder writes a small random qwen3 decoder (f32) as GGUF; with pooling >= 0 the
// file also carries qwen3.pooling_type = pooling, as a Qwen3-Embedding GGUF does.
func writeDecoder(t *testing.T, pooling int) string {
	t.Helper()
	s, err := synth.Lookup("qwen3-0.6b")
	if err != nil {
		t.Fatal(err)
	}
	c := s.Config
	c.VocabSize, c.Dim, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.FFNDim, c.RopeDim = 256, 64, 2, 4, 2, 16, 128, 16
	c = synth.Rederive(c)
	tensors, err := synth.Tensors(c, quant.F32, 5, synth.GGUF)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "qwen3.gguf")
	if err := format.WriteGGUF(path, format.Contents{Name: "qwen3 test", Config: c}, quant.F32, tensors, nil); err != nil {
		t.Fatal(err)
	}
	if pooling < 0 {
		return path
	}
	g, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var wts []gguf.WriterTensor
	for i := range g.Tensors {
		ti := &g.Tensors[i]
		data, err := g.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		wts = append(wts, gguf.WriterTensor{Name: ti.Name, Type: ti.Type, Dims: ti.Dims, Data: data})
	}
	kvs := append(g.KV, gguf.KV{Key: "qwen3.pooling_type", Value: gguf.Uint32(uint32(pooling))})
	out := filepath.Join(t.TempDir(), "qwen3-embedding.gguf")
	if err := gguf.WriteFile(out, kvs, wts, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDecoderEmbedderMatchesReference: a decoder's last-token embeddings, batched, are its
// final hidden states: projected onto the vocabulary by the tied embedding matrix they give
// the logits of the fp32 single-sequence reference (model.Reference) at the last token,
// each input alone.
func TestDecoderEmbedderMatchesReference(t *testing.T) {
	path := writeDecoder(t, -1)
	e, err := OpenEmbedder(path, EmbedderOptions{Pooling: "last", Threads: 2, MaxBatchTokens: 40})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Pooling() != "last" || e.Dim() != 64 || e.HasClassifier() || e.MaxLen() != 40 {
		t.Fatalf("pooling %s, dim %d, classifier %v, max len %d", e.Pooling(), e.Dim(), e.HasClassifier(), e.MaxLen())
	}
	var inputs []EmbedInput
	for _, n := range []int{1, 7, 17, 33, 2, 16} { // 76 tokens: more than one forward of 40
		in := EmbedInput{}
		for i := range n {
			in.Tokens = append(in.Tokens, int32((i*37+n)%256))
		}
		inputs = append(inputs, in)
	}
	got, err := e.Embed(context.Background(), inputs)
	if err != nil {
		t.Fatal(err)
	}
	fm, err := format.Open(path, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	var emb []float32
	for _, ft := range fm.Tensors {
		if ft.Name == "token_embd.weight" {
			emb = make([]float32, ft.Elements())
			if err := quant.Dequantize(ft.Type, ft.Data, emb); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !fm.Config.TiedEmbeddings || emb == nil {
		t.Fatal("the test model has no tied embeddings")
	}
	ref, err := model.NewReference(fm)
	if err != nil {
		t.Fatal(err)
	}
	d := fm.Config.Dim
	for i, in := range inputs {
		ref.Reset()
		var want []float32
		for _, tok := range in.Tokens {
			if want, err = ref.Forward(int(tok)); err != nil {
				t.Fatal(err)
			}
		}
		var worst, scale float64
		for v := range fm.Config.VocabSize {
			var l float64
			for j, x := range got[i] {
				l += float64(x) * float64(emb[v*d+j])
			}
			worst, scale = math.Max(worst, math.Abs(l-float64(want[v]))), math.Max(scale, math.Abs(float64(want[v])))
		}
		if worst > 1e-4*scale {
			t.Errorf("input %d (%d tokens): projected embedding differs from the reference logits by %.2g (of %.2g)", i, len(in.Tokens), worst, scale)
		}
	}
	long := EmbedInput{Tokens: make([]int32, 41)}
	if _, err := e.Embed(context.Background(), []EmbedInput{long}); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("an input longer than MaxLen: %v", err)
	}
}

// TestDecoderEmbedderPooling: a decoder is an embedding model with pooling last, from the
// option or from its GGUF's pooling_type; other poolings and none are refused with the
// reason.
func TestDecoderEmbedderPooling(t *testing.T) {
	plain, last, mean := writeDecoder(t, -1), writeDecoder(t, 3), writeDecoder(t, 1)
	if DecoderPooling(plain) != "" || DecoderPooling(last) != "last" || DecoderPooling(mean) != "mean" {
		t.Errorf("DecoderPooling: %q, %q, %q", DecoderPooling(plain), DecoderPooling(last), DecoderPooling(mean))
	}
	e, err := OpenEmbedder(last, EmbedderOptions{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if e.Pooling() != "last" {
		t.Errorf("pooling %s from pooling_type 3", e.Pooling())
	}
	if _, err := e.TokenizePair("a", "b"); err == nil {
		t.Error("a decoder tokenized a pair for a cross-encoder")
	}
	e.Close()
	for _, c := range []struct {
		path, pooling, want string
	}{
		{plain, "", "--pooling last"},
		{plain, "mean", "last token only"},
		{mean, "", "last token only"},
		{plain, "max", "want mean, cls or last"},
	} {
		if _, err := OpenEmbedder(c.path, EmbedderOptions{Pooling: c.pooling, Threads: 1}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with pooling %q: %v, want an error saying %q", filepath.Base(c.path), c.pooling, err, c.want)
		}
	}
}
