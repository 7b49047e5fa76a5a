package kvasir

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestDecoderEmbedderMatchesReference: a decoder's last-token embeddings, batched (in
// chunks of a 40-token budget), are its final hidden states: projected onto the
// vocabulary by the tied embedding matrix they give the logits of the fp32 single-sequence
// reference (model.Reference) at the last token, each input alone; its mean embeddings
// project to the mean of the reference's logits over the input (the projection is
// linear).
func TestDecoderEmbedderMatchesReference(t *testing.T) {
	for _, pooling := range []string{"last", "mean"} {
		t.Run(pooling, func(t *testing.T) { checkDecoderEmbedder(t, pooling) })
	}
}

func checkDecoderEmbedder(t *testing.T, pooling string) {
	path := writeDecoder(t, -1)
	e, err := OpenEmbedder(path, EmbedderOptions{Pooling: pooling, Threads: 2, MaxBatchTokens: 40})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Pooling() != pooling || e.Dim() != 64 || e.HasClassifier() || e.MaxLen() <= 76 {
		t.Fatalf("pooling %s, dim %d, classifier %v, max len %d", e.Pooling(), e.Dim(), e.HasClassifier(), e.MaxLen())
	}
	var inputs []EmbedInput
	for _, n := range []int{1, 7, 17, 33, 2, 16, 76} { // more than one step of 40
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
		want := make([]float32, fm.Config.VocabSize)
		for _, tok := range in.Tokens {
			logits, err := ref.Forward(int(tok))
			if err != nil {
				t.Fatal(err)
			}
			if pooling == "last" {
				copy(want, logits)
				continue
			}
			for v, l := range logits {
				want[v] += l / float32(len(in.Tokens))
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
	long := EmbedInput{Tokens: make([]int32, e.MaxLen()+1)}
	if _, err := e.Embed(context.Background(), []EmbedInput{long}); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("an input longer than MaxLen: %v", err)
	}
}

// TestDecoderEmbedderPooling: a decoder is an embedding model with pooling last or mean,
// from the option or from its GGUF's pooling_type; [CLS] pooling and none are refused with
// the reason.
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
	if e, err = OpenEmbedder(mean, EmbedderOptions{Threads: 1}); err != nil || e.Pooling() != "mean" {
		t.Errorf("pooling_type 1: %v", err)
	} else {
		e.Close()
	}
	for _, c := range []struct {
		path, pooling, want string
	}{
		{plain, "", "--pooling last"},
		{plain, "cls", "pooling last or mean"},
		{plain, "max", "want mean, cls or last"},
	} {
		if _, err := OpenEmbedder(c.path, EmbedderOptions{Pooling: c.pooling, Threads: 1}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with pooling %q: %v, want an error saying %q", filepath.Base(c.path), c.pooling, err, c.want)
		}
	}
}

// sharedPrefixInputs are n inputs of one shared prefix of prefix tokens, each with a suffix
// of its own (2 to n+1 tokens), in a vocabulary of 256.
func sharedPrefixInputs(n, prefix int) []EmbedInput {
	head := make([]int32, prefix)
	for i := range head {
		head[i] = int32((i*29 + 11) % 256)
	}
	out := make([]EmbedInput, n)
	for i := range out {
		toks := append([]int32{}, head...)
		for j := range i + 2 {
			toks = append(toks, int32((j*53+i*17+5)%256))
		}
		out[i] = EmbedInput{Tokens: toks}
	}
	return out
}

func vecCosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// TestDecoderEmbedderPrefixCaching: a decoder's embeddings of inputs sharing a 200-token
// prefix are the same (cosine >= 0.99999) with prefix caching on and off, in one call,
// one input per call, and in concurrent calls (batching invariance), for last-token and
// mean pooling; with it on, last-token pooling computes the prefix once (prefix hits) and
// mean pooling never takes a hit. No KV block stays held after the calls, nor after a
// call whose caller went away mid-prefill.
func TestDecoderEmbedderPrefixCaching(t *testing.T) {
	path := writeDecoder(t, -1)
	inputs := sharedPrefixInputs(12, 200)
	for _, pooling := range []string{"last", "mean"} {
		t.Run(pooling, func(t *testing.T) {
			var base [][]float32
			for _, off := range []bool{true, false} {
				e, err := OpenEmbedder(path, EmbedderOptions{Pooling: pooling, Threads: 2, MaxBatchTokens: 64, DisablePrefixCaching: off})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				// One input first (it fills the prefix cache), then the rest in one call.
				first, err := e.Embed(ctx, inputs[:1])
				if err != nil {
					t.Fatal(err)
				}
				rest, err := e.Embed(ctx, inputs[1:])
				if err != nil {
					t.Fatal(err)
				}
				together := append(first, rest...)
				var alone [][]float32
				for _, in := range inputs {
					v, err := e.Embed(ctx, []EmbedInput{in})
					if err != nil {
						t.Fatal(err)
					}
					alone = append(alone, v[0])
				}
				concurrent := make([][]float32, len(inputs))
				var wg sync.WaitGroup
				errs := make([]error, len(inputs))
				for i, in := range inputs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						v, err := e.Embed(ctx, []EmbedInput{in})
						if err == nil {
							concurrent[i] = v[0]
						}
						errs[i] = err
					}()
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
				if base == nil {
					base = together
				}
				for i := range inputs {
					for name, v := range map[string][]float32{"together": together[i], "alone": alone[i], "concurrent": concurrent[i]} {
						if c := vecCosine(v, base[i]); c < 0.99999 {
							t.Errorf("prefix caching off %v, %s: input %d: cosine %.7f to prefix caching off, together", off, name, i, c)
						}
					}
				}
				st := e.eng.Stats()
				switch {
				case off || pooling == "mean":
					if st.PrefixHits != 0 {
						t.Errorf("prefix caching off %v, %s pooling: %d prefix hits", off, pooling, st.PrefixHits)
					}
				case st.PrefixHits < int64(3*len(inputs)-1)*192: // 12 blocks of the prefix each
					t.Errorf("last-token pooling with prefix caching: %d prefix hits of %d looked up", st.PrefixHits, st.PrefixQueries)
				}
				// A caller that goes away mid-prefill: its blocks come back.
				long := EmbedInput{Tokens: make([]int32, 3000)}
				for i := range long.Tokens {
					long.Tokens[i] = int32(i * 7 % 256)
				}
				cctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() {
					_, err := e.Embed(cctx, []EmbedInput{long})
					done <- err
				}()
				deadline := time.Now().Add(20 * time.Second)
				for e.eng.Stats().UsedBlocks == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Errorf("a cancelled call: %v, want context.Canceled", err)
				}
				for e.eng.Stats().UsedBlocks != 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if st := e.eng.Stats(); st.UsedBlocks != 0 || st.Running != 0 || st.Waiting != 0 {
					t.Errorf("after the calls: %d blocks held, %d running, %d waiting", st.UsedBlocks, st.Running, st.Waiting)
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				if _, err := e.Embed(ctx, inputs[:1]); !errors.Is(err, ErrClosed) {
					t.Errorf("Embed after Close: %v, want ErrClosed", err)
				}
			}
		})
	}
}
