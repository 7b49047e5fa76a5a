package model

import (
	"fmt"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// newArchShapes are the small configs of the architectures beyond the Llama family: Gemma
// 2 and 3 (windowed and soft-capped attention, every variation at once), Phi-3 (split
// projections, a window), Granite (multipliers), OLMo 2 (post-norms only), and a Mistral
// with a sliding window on every layer.
func newArchShapes(t *testing.T) map[string]format.Config {
	t.Helper()
	out := map[string]format.Config{}
	for _, name := range []string{"gemma2-tiny", "gemma3-tiny", "phi3-tiny", "granite-tiny", "olmo2-tiny", "deepseek-v2-tiny"} {
		s, err := synth.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = smallConfig(s.Config)
	}
	mistral := smallConfig(format.Config{Arch: "llama", Heads: 8, KVHeads: 2, HeadDim: 64, ContextLen: 4096,
		NormEps: 1e-5, RopeTheta: 10000, SlidingWindow: 4096})
	out["mistral-window"] = mistral
	return out
}

// TestWindowSeesOnlyItsWindow: in a one-layer model with a window of 4, the last token's
// logits depend on the last 4 tokens only: two prompts that differ before them give the
// same logits, on the fast path and the reference path alike; without the window they
// differ.
func TestWindowSeesOnlyItsWindow(t *testing.T) {
	c := format.Config{Arch: "llama", VocabSize: 256, Dim: 256, Layers: 1, Heads: 4, KVHeads: 2, HeadDim: 64,
		RopeDim: 64, FFNDim: 256, ContextLen: 4096, NormEps: 1e-5, RopeTheta: 10000, SlidingWindow: 4}
	a := testTokens(11)
	b := append([]int32{}, a...)
	for i := range 7 {
		b[i] = (b[i] + 1 + int32(i)) % 256
	}
	last := func(rows [][]float32) [][]float32 { return rows[len(rows)-1:] }
	for _, window := range []int{4, 0} {
		c.SlidingWindow = window
		fm := writeTwin(t, c, quant.F32, synth.GGUF)
		fa, fb := last(fastLogits(t, fm, a, nil)), last(fastLogits(t, fm, b, nil))
		ra, rb := last(refLogits(t, fm, a, nil)), last(refLogits(t, fm, b, nil))
		fast, ref := relErr(fa, fb), relErr(ra, rb)
		if window > 0 && (fast > 1e-6 || ref > 1e-6) {
			t.Errorf("window %d: tokens before the window change the logits by %.3g (fast), %.3g (reference)", window, fast, ref)
		}
		if window == 0 && (fast < 1e-3 || ref < 1e-3) {
			t.Errorf("no window: tokens far back change the logits by only %.3g (fast), %.3g (reference)", fast, ref)
		}
	}
}

// TestNewArchBatchAndPrefixInvariance: for the new architectures, three sequences
// prefilled and decoded together give each one's logits alone; and a sequence whose
// first blocks are a prefix-cache hit (another sequence's blocks, only its tail
// computed) gives the logits of computing it all. Greedy tokens from chunked prefill
// (chunks of 1, 3 and all) agree.
func TestNewArchBatchAndPrefixInvariance(t *testing.T) {
	const bs = 4
	for name, c := range newArchShapes(t) {
		t.Run(name, func(t *testing.T) {
			fm := writeTwin(t, c, quant.F32, synth.GGUF)
			m, err := New(fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			vocab := m.Config().VocabSize
			seqs := []seqRun{
				{prompt: testTokens(13), table: []int32{7, 1, 4, 10}},
				{prompt: testTokens(17)[3:], table: []int32{0, 9, 2, 11}},
				{prompt: testTokens(8)[1:], table: []int32{5, 8, 3, 6}},
			}
			lens, pre := make([]int, len(seqs)), make([]int, len(seqs))
			for i, s := range seqs {
				lens[i], pre[i] = len(s.prompt), len(s.prompt)-1
			}
			kv, err := m.NewKVCache(16, bs)
			if err != nil {
				t.Fatal(err)
			}
			together, err := m.Forward(batchFor(seqs, []int{0, 0, 0}, pre, bs), kv)
			if err != nil {
				t.Fatal(err)
			}
			dec, err := m.Forward(batchFor(seqs, pre, lens, bs), kv)
			if err != nil {
				t.Fatal(err)
			}
			row := 0
			for i, s := range seqs {
				alone, err := m.NewKVCache(16, bs)
				if err != nil {
					t.Fatal(err)
				}
				one := []seqRun{s}
				a, err := m.Forward(batchFor(one, []int{0}, []int{pre[i]}, bs), alone)
				if err != nil {
					t.Fatal(err)
				}
				ad, err := m.Forward(batchFor(one, []int{pre[i]}, []int{lens[i]}, bs), alone)
				if err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff(together[row*vocab:(row+pre[i])*vocab], a); d > invariantTol {
					t.Errorf("sequence %d: prefill logits in a batch differ from alone by %g (relative)", i, d)
				}
				if d := maxAbsDiff(dec[i*vocab:(i+1)*vocab], ad); d > invariantTol {
					t.Errorf("sequence %d: decode logits in a batch differ from alone by %g (relative)", i, d)
				}
				row += pre[i]
			}

			// A prefix-cache hit: sequence 0's first two blocks (8 tokens) start a new
			// sequence with another tail; only the tail runs.
			hit := seqRun{prompt: append(append([]int32{}, seqs[0].prompt[:8]...), 11, 22, 33, 44, 55, 66),
				table: []int32{seqs[0].table[0], seqs[0].table[1], 12, 13}}
			tail, err := m.Forward(batchFor([]seqRun{hit}, []int{8}, []int{len(hit.prompt)}, bs), kv)
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := m.NewKVCache(16, bs)
			if err != nil {
				t.Fatal(err)
			}
			full, err := m.Forward(batchFor([]seqRun{hit}, []int{0}, []int{len(hit.prompt)}, bs), fresh)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxAbsDiff(tail, full[8*vocab:]); d > invariantTol {
				t.Errorf("prefix-cache hit: tail logits differ from a full prefill by %g (relative)", d)
			}

			var want string
			for _, chunk := range []int{1, 3, 64} {
				s, err := m.NewSession(64)
				if err != nil {
					t.Fatal(err)
				}
				s.Chunk = chunk
				got, _ := generateWith(t, s, testTokens(11), 16)
				if want == "" {
					want = fmt.Sprint(got)
				} else if fmt.Sprint(got) != want {
					t.Errorf("prefill in chunks of %d: greedy %v, chunks of 1: %s", chunk, got, want)
				}
			}
		})
	}
}

// TestWindowedMatchesReference: the Mistral-style windowed model's fast path matches the
// reference path beyond its window (the Gemma shapes run in TestSynthFastMatchesReference).
func TestWindowedMatchesReference(t *testing.T) {
	c := newArchShapes(t)["mistral-window"]
	for _, dt := range []quant.Type{quant.F32, quant.Q8_0} {
		fm := writeTwin(t, c, dt, synth.GGUF)
		prompt, decode := testTokens(13), []int32{3, 200, 77}
		if e := relErr(fastLogits(t, fm, prompt, decode), refLogits(t, fm, prompt, decode)); e > dtypeTolerance[dt] {
			t.Errorf("%s: fast path differs from the reference path by %.3g (relative)", dt, e)
		}
	}
}

// generateWith prefills prompt through s (in its chunks) and decodes n greedy tokens.
func generateWith(t *testing.T, s *Session, prompt []int32, n int) ([]int32, [][]float32) {
	t.Helper()
	logits, err := s.Prefill(prompt)
	if err != nil {
		t.Fatal(err)
	}
	var toks []int32
	var all [][]float32
	for range n {
		all = append(all, logits)
		tok := int32(sample.Greedy(logits))
		toks = append(toks, tok)
		if logits, err = s.Step(tok); err != nil {
			t.Fatal(err)
		}
	}
	return toks, all
}
