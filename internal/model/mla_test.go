package model

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// mlaVariants are small MLA models beyond deepseek-v2-tiny and deepseek-v3-tiny (which
// testShapes runs): the Lite layout (q straight from the stream, no q rank) with
// renormalized routing and a routed scale, YaRN scaling (DeepSeek's: scores scaled by
// m(mscale_all_dim)²), a dense model with no experts, and V3's routing without groups.
func mlaVariants(t *testing.T) map[string]format.Config {
	t.Helper()
	s, err := synth.Lookup("deepseek-v2-tiny")
	if err != nil {
		t.Fatal(err)
	}
	base := smallConfig(s.Config)
	lite := base
	lite.QLoRARank, lite.NormTopKProbs, lite.ExpertScale, lite.LeadingDenseLayers = 0, true, 2.5, 0
	yarn := base
	yarn.Scaling = format.RopeScaling{Type: "yarn", Factor: 40, OriginalContextLen: 8, BetaFast: 32, BetaSlow: 1,
		MScale: 0.707, MScaleAllDim: 0.707, AttnFactor: 1}
	m := 0.1*0.707*math.Log(40) + 1
	yarn.AttnScale = m * m / math.Sqrt(float64(base.QKNopeDim+base.RopeDim))
	dense := base
	dense.Experts, dense.ExpertsUsed, dense.ExpertFFNDim, dense.SharedExpertFFN, dense.LeadingDenseLayers, dense.ExpertScale = 0, 0, 0, 0, 0, 0
	// DeepSeek-V3's sigmoid routing with its selection bias, without groups (the grouped
	// form is deepseek-v3-tiny's, in testShapes).
	v3 := base
	v3.ExpertSigmoid, v3.NormTopKProbs, v3.ExpertScale = true, true, 2.5
	return map[string]format.Config{"lite": lite, "yarn": yarn, "dense": dense, "v3-nogroups": v3}
}

// TestMLAVariantsMatchReference: each variant's fast path (absorbed projections over the
// latent cache) gives the reference path's logits (keys and values decompressed head by
// head), and its GGUF and HF twins agree.
func TestMLAVariantsMatchReference(t *testing.T) {
	prompt, decode := testTokens(13), []int32{3, 200, 77}
	for name, c := range mlaVariants(t) {
		t.Run(name, func(t *testing.T) {
			fm := writeTwin(t, c, quant.F32, synth.GGUF)
			fast := fastLogits(t, fm, prompt, decode)
			if e := relErr(fast, refLogits(t, fm, prompt, decode)); e > dtypeTolerance[quant.F32] {
				t.Errorf("fast path differs from the reference path by %.3g (relative)", e)
			}
			hf := fastLogits(t, writeTwin(t, c, quant.F32, synth.HF), prompt, decode)
			if e := relErr(hf, fast); e > 1e-5 {
				t.Errorf("HF twin differs from the GGUF twin by %.3g (relative)", e)
			}
		})
	}
}

// TestMLACacheHoldsLatent: an MLA model's cache holds one vector a token per layer, the
// rotated key and the latent (RopeDim + KVLoRARank values), whatever the head count: not
// the heads' keys and values, and held once (its values are its keys), for the small
// deepseek-v2-tiny and for the released models' 64 + 512 (deepseek-v2-lite-attn).
func TestMLACacheHoldsLatent(t *testing.T) {
	for _, name := range []string{"deepseek-v2-tiny", "deepseek-v2-lite-attn"} {
		s, err := synth.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		c := smallConfig(s.Config)
		m, err := New(writeTwin(t, c, quant.F32, synth.GGUF), Options{Backends: cpuBackends(t, 1, Parallel{})})
		if err != nil {
			t.Fatal(err)
		}
		spec := m.ranks[0].kvSpec(4, 16, quant.F32)
		if spec.KVHeads != 1 || spec.HeadDim != c.RopeDim+c.KVLoRARank || !spec.ValuesAreKeys {
			t.Errorf("%s: cache of %d heads of %d (values are keys: %v), want 1 of %d (rope %d + latent %d), values the keys", name,
				spec.KVHeads, spec.HeadDim, spec.ValuesAreKeys, c.RopeDim+c.KVLoRARank, c.RopeDim, c.KVLoRARank)
		}
		perToken := spec.BlockBytes() / spec.BlockSize / spec.Layers
		decompressed := 4 * c.Heads * (c.QKNopeDim + c.RopeDim + c.VHeadDim)
		t.Logf("%s: cache bytes a token and layer: %d (decompressed keys and values: %d)", name, perToken, decompressed)
		if want := 4 * (c.RopeDim + c.KVLoRARank); perToken != want {
			t.Errorf("%s: cache bytes a token and layer %d, want one vector of %d", name, perToken, want)
		}
		if got, want := m.KVBytesPerToken(), int64(4*(c.RopeDim+c.KVLoRARank)*c.Layers); got != want {
			t.Errorf("%s: KVBytesPerToken %d, want %d", name, got, want)
		}
		m.Close()
	}
}

// TestMLASplitKVB: a GGUF that holds each layer's attn_kv_b as llama.cpp's MLA files do,
// split into attn_k_b (each head's key rows transposed) and attn_v_b, gives the logits of
// the file with attn_kv_b.
func TestMLASplitKVB(t *testing.T) {
	s, err := synth.Lookup("deepseek-v2-tiny")
	if err != nil {
		t.Fatal(err)
	}
	c := smallConfig(s.Config)
	tensors, err := synth.Tensors(c, quant.F32, 7, synth.GGUF)
	if err != nil {
		t.Fatal(err)
	}
	nope, vd, r := c.QKNopeDim, c.VHeadDim, c.KVLoRARank
	var split []format.OutTensor
	for _, ot := range tensors {
		base, ok := strings.CutSuffix(ot.Name, "attn_kv_b.weight")
		if !ok {
			split = append(split, ot)
			continue
		}
		var buf bytes.Buffer
		if err := ot.Write(&buf); err != nil {
			t.Fatal(err)
		}
		kvb := make([]float32, c.Heads*(nope+vd)*r)
		if err := quant.Dequantize(ot.Type, buf.Bytes(), kvb); err != nil {
			t.Fatal(err)
		}
		kb, vb := make([]float32, c.Heads*r*nope), make([]float32, c.Heads*vd*r)
		for h := range c.Heads {
			for i := range nope {
				for j := range r {
					kb[(h*r+j)*nope+i] = kvb[(h*(nope+vd)+i)*r+j]
				}
			}
			copy(vb[h*vd*r:], kvb[(h*(nope+vd)+nope)*r:][:vd*r])
		}
		for _, part := range []struct {
			name  string
			vals  []float32
			shape []int
		}{{"attn_k_b.weight", kb, []int{c.Heads, r, nope}}, {"attn_v_b.weight", vb, []int{c.Heads, vd, r}}} {
			data := make([]byte, 4*len(part.vals))
			if err := quant.Quantize(quant.F32, part.vals, data); err != nil {
				t.Fatal(err)
			}
			split = append(split, format.OutTensor{Name: base + part.name, Type: quant.F32, Shape: part.shape, Data: data})
		}
	}
	path := filepath.Join(t.TempDir(), "split.gguf")
	if err := format.WriteGGUF(path, format.Contents{Name: "split", Config: c}, quant.F32, split, nil); err != nil {
		t.Fatal(err)
	}
	fm, err := format.Open(path, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	prompt, decode := testTokens(11), []int32{9, 250}
	want := fastLogits(t, writeTwin(t, c, quant.F32, synth.GGUF), prompt, decode)
	if e := relErr(fastLogits(t, fm, prompt, decode), want); e > 1e-6 {
		t.Errorf("split attn_k_b/attn_v_b: logits differ from attn_kv_b's by %.3g (relative)", e)
	}
}
