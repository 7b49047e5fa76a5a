package model

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// smallConfig shrinks a real shape to a fast test size while keeping what makes it that
// architecture: GQA ratio, head size class, biases, QK norm, tied output, rope style and
// scaling, experts. Sizes stay multiples of 256 so every quantized type applies.
func smallConfig(c format.Config) format.Config {
	if c.MLA() {
		// The DeepSeek shape is small already; two layers keep one dense and one of experts.
		c.Layers, c.VocabSize = 2, 256
		return c
	}
	ratio := c.Heads / c.KVHeads
	c.Layers = 2
	c.VocabSize = 256
	c.KVHeads = min(c.KVHeads, 2)
	if ratio%3 == 0 {
		c.KVHeads = 1 // keep an odd group size, with heads dividing the model width
	}
	if ratio == 1 {
		c.KVHeads = 4 // multi-head attention (Phi-3) in heads enough to split four ways
	}
	c.Heads = c.KVHeads * min(ratio, 4)
	if c.HeadDim > 64 {
		c.HeadDim = 128
	} else {
		c.HeadDim = 64
	}
	c.RopeDim = c.HeadDim
	c.Dim = 256 * c.Heads / gcd(c.Heads, 256)
	c.FFNDim = 256
	if c.Experts > 0 {
		c.Experts, c.ExpertsUsed, c.ExpertFFNDim = 4, 2, 256
	}
	if c.SlidingWindow > 0 {
		// A window shorter than the test prompts, and a whole period of the alternation of
		// windowed and global layers.
		c.SlidingWindow = 5
		c.Layers = max(c.Layers, c.SlidingWindowPattern)
	}
	return synth.Rederive(c)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// qwen2MoEConfig is a small Qwen2-MoE: routed experts without renormalization plus a
// sigmoid-gated shared expert.
func qwen2MoEConfig() format.Config {
	return format.Config{
		Arch: "qwen2moe", VocabSize: 256, Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64,
		RopeDim: 64, FFNDim: 256, ContextLen: 4096, NormEps: 1e-6, RopeTheta: 1000000,
		RopeStyle: format.RopeNeox, QKVBias: true, Experts: 4, ExpertsUsed: 2, ExpertFFNDim: 256,
		SharedExpertFFN: 512,
	}
}

// qwen3MoEConfig is a small Qwen3-MoE: QK norms, routed experts renormalized over the
// chosen ones (norm_topk_prob), no shared expert.
func qwen3MoEConfig() format.Config {
	return format.Config{
		Arch: "qwen3moe", VocabSize: 256, Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64,
		RopeDim: 64, FFNDim: 128, ContextLen: 4096, NormEps: 1e-6, RopeTheta: 1000000,
		RopeStyle: format.RopeNeox, QKNorm: true, Experts: 8, ExpertsUsed: 2, ExpertFFNDim: 128,
		NormTopKProbs: true,
	}
}

// ggufShapes returns testShapes and the shapes kvasir reads from GGUF only, with no Hugging
// Face twin to hold them to (Qwen3-MoE: format.HFArchitecture has no class for it yet).
func ggufShapes(t *testing.T) map[string]format.Config {
	out := testShapes(t)
	out["qwen3moe-tiny"] = qwen3MoEConfig()
	return out
}

// twinnedShapes are the real shapes whose small twin among the built-in shapes (the same
// architecture, "-tiny") stands in for them in the tests, to keep the tests short.
var twinnedShapes = map[string]bool{"gemma2-2b": true, "gemma3-1b": true, "phi3-mini": true, "granite-3-2b": true, "olmo2-1b": true}

// testShapes returns the configs the synthesized tests run: every built-in shape (but the
// twinned ones), small.
func testShapes(t *testing.T) map[string]format.Config {
	out := map[string]format.Config{"qwen2moe-tiny": qwen2MoEConfig()}
	for _, name := range synth.Names() {
		if twinnedShapes[name] {
			continue
		}
		s, err := synth.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = smallConfig(s.Config)
	}
	return out
}

// writeTwin writes a random model of config c to dir as a GGUF file (target GGUF) or a
// Hugging Face folder (target HF) and opens it.
func writeTwin(t *testing.T, c format.Config, dtype quant.Type, target synth.Target) *format.Model {
	t.Helper()
	tensors, err := synth.Tensors(c, dtype, 7, target)
	if err != nil {
		t.Fatal(err)
	}
	contents := format.Contents{Name: "test", Config: c}
	var path string
	if target == synth.GGUF {
		path = filepath.Join(t.TempDir(), "m.gguf")
		err = format.WriteGGUF(path, contents, dtype, tensors, nil)
	} else {
		path = t.TempDir()
		err = format.WriteHF(path, contents, dtype, tensors, 0, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	fm, err := format.Open(path, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	return fm
}

// testTokens are a prompt's ids for a 256-token vocabulary.
func testTokens(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32((i*131 + 17) % 256)
	}
	return out
}

// fastLogits prefills tokens in one batch (all rows' logits), then decodes the extra tokens
// one by one, returning the logits of every position.
func fastLogits(t *testing.T, fm *format.Model, prompt, decode []int32) [][]float32 {
	t.Helper()
	return fastLogitsWith(t, fm, Options{Backends: cpuBackends(t, 2, Parallel{})}, prompt, decode)
}

// fastLogitsWith is fastLogits on the model New makes with opt.
func fastLogitsWith(t *testing.T, fm *format.Model, opt Options, prompt, decode []int32) [][]float32 {
	t.Helper()
	m, err := New(fm, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	kv, err := m.NewKVCache(8, 8)
	if err != nil {
		t.Fatal(err)
	}
	table := []int32{5, 2, 7, 0, 1, 3, 4, 6} // scattered on purpose
	slot := func(pos int) int32 { return table[pos/8]*8 + int32(pos%8) }
	n := len(prompt)
	b := &Batch{Tokens: prompt, Seqs: []Seq{{BlockTable: table, QueryLen: n, ContextLen: n}}}
	for i := range n {
		b.Positions = append(b.Positions, int32(i))
		b.SlotMapping = append(b.SlotMapping, slot(i))
		b.LogitsIndices = append(b.LogitsIndices, i)
	}
	logits, err := m.Forward(b, kv)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Config().VocabSize
	var out [][]float32
	for i := range n {
		out = append(out, logits[i*v:(i+1)*v])
	}
	for j, tok := range decode {
		pos := n + j
		b := &Batch{Tokens: []int32{tok}, Positions: []int32{int32(pos)}, SlotMapping: []int32{slot(pos)},
			Seqs: []Seq{{BlockTable: table, QueryLen: 1, ContextLen: pos + 1}}, LogitsIndices: []int{0}}
		l, err := m.Forward(b, kv)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// refLogits runs the reference path over prompt then decode, one token at a time.
func refLogits(t *testing.T, fm *format.Model, prompt, decode []int32) [][]float32 {
	t.Helper()
	r, err := NewReference(fm)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	for _, tok := range append(append([]int32(nil), prompt...), decode...) {
		l, err := r.Forward(int(tok))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// relErr returns max |a-b| over max |b| across all rows.
func relErr(a, b [][]float32) float64 {
	var diff, scale float64
	for i := range b {
		for j, v := range b[i] {
			diff = max(diff, math.Abs(float64(a[i][j]-v)))
			scale = max(scale, math.Abs(float64(v)))
		}
	}
	return diff / max(scale, 1e-30)
}

// dtypeTolerance is the relative logit error allowed between the fast path and the
// reference path per weight type: f32/f16/bf16 weights are used exactly by both, so only
// summation order differs; quantized weights are dotted with activations quantized to 8
// bits (Q8_0 or Q8_K), as GGML does, which the reference path does not do; in a mixture of
// experts that rounding can also flip a close routing choice.
var dtypeTolerance = map[quant.Type]float64{
	quant.F32: 1e-5, quant.F16: 1e-5, quant.BF16: bf16Tolerance(),
	quant.Q8_0: 5e-2, quant.Q4_0: 1e-1, quant.Q4_K: 1e-1,
}

// bf16Tolerance is BF16's tolerance: float32 rounding, or where the CPU's prefill rounds the
// activations to bfloat16 (cpu.RoundsBF16Activations; measured 5e-3), a fifth of Q8_0's,
// whose activations are rounded to 8 bits.
func bf16Tolerance() float64 {
	if cpu.RoundsBF16Activations() {
		return 1e-2
	}
	return 1e-5
}

// allDtypeShapes are the shapes tested in every weight type; the others run F32 and Q8_0
// only, to keep the test short (quantizing Q4_K files is slow).
var allDtypeShapes = map[string]bool{"llama-3.2-1b": true, "qwen2.5-0.5b": true, "qwen2moe-tiny": true}

// TestSynthFastMatchesReference: for every shape and weight type, the fast path's logits
// (batched prefill over a scattered block table, then decode steps) match the reference
// path's within the type's tolerance.
func TestSynthFastMatchesReference(t *testing.T) {
	prompt, decode := testTokens(13), []int32{3, 200, 77}
	for name, c := range ggufShapes(t) {
		dtypes := []quant.Type{quant.F32, quant.Q8_0}
		if allDtypeShapes[name] {
			dtypes = append(dtypes, quant.F16, quant.BF16, quant.Q4_0, quant.Q4_K)
		}
		for _, dt := range dtypes {
			t.Run(fmt.Sprintf("%s/%s", name, dt), func(t *testing.T) {
				fm := writeTwin(t, c, dt, synth.GGUF)
				fast := fastLogits(t, fm, prompt, decode)
				ref := refLogits(t, fm, prompt, decode)
				e := relErr(fast, ref)
				t.Logf("relative error %.2g", e)
				if e > dtypeTolerance[dt] {
					t.Errorf("fast path differs from the reference path by %.3g (relative), allowed %.g", e, dtypeTolerance[dt])
				}
			})
		}
	}
}

// TestSynthTwins: a model written as GGUF (interleaved rope for "llama", stacked experts,
// Llama 3 scaling as rope_freqs.weight) and as a Hugging Face folder (NeoX rope, one tensor
// per expert, scaling in config.json) gives the same logits.
func TestSynthTwins(t *testing.T) {
	prompt, decode := testTokens(11), []int32{9, 250}
	for name, c := range testShapes(t) {
		for _, dt := range []quant.Type{quant.F32, quant.BF16} {
			t.Run(fmt.Sprintf("%s/%s", name, dt), func(t *testing.T) {
				g := fastLogits(t, writeTwin(t, c, dt, synth.GGUF), prompt, decode)
				h := fastLogits(t, writeTwin(t, c, dt, synth.HF), prompt, decode)
				e := relErr(h, g)
				t.Logf("relative error %.2g", e)
				// The twins' rotations differ in float32's last bits; activations rounded
				// to bfloat16 (bf16Tolerance) make some of those whole bfloat16 steps.
				tol := 1e-5
				if dt == quant.BF16 {
					tol = dtypeTolerance[dt]
				}
				if e > tol {
					t.Errorf("HF twin differs from the GGUF twin by %.3g (relative)", e)
				}
			})
		}
	}
}
