package model

import (
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
)

// The pieces of Gemma 2 and 3 beyond the Llama block (see format/gemma.go for the
// Config): a GeGLU MLP, norms of each half-block's output, local layers with a rotary
// base of their own, and soft-capped logits. The attention variations (window, scale,
// soft-capped scores) are the backend's AttentionWith.

// geluTanh is Config.Activation of a GeGLU MLP.
const geluTanh = "gelu_tanh"

// geglu computes the GeGLU feed-forward out = down(gelu_tanh(gate·x) * up·x), with a.gate
// and a.up as scratch.
func (s *shard) geglu(out, x backend.Tensor, a *activations, lw *layerWeights[backend.Tensor]) error {
	if err := s.projectLinear([]backend.Tensor{a.gate, a.up}, x, a, lw, gateUpNames, []backend.Tensor{lw.gate, lw.up}); err != nil {
		return err
	}
	if err := s.be.GeGLU(a.gate, a.gate, a.up); err != nil {
		return err
	}
	return s.linear(out, a.gate, a, lw, "ffn_down", lw.down)
}

// halfOut finishes a half-block's output x in place before it joins the residual stream,
// once the tensor-parallel ranks' partial outputs are summed: Gemma's RMSNorm by the
// post-norm weight (when there is one), Granite's residual multiplier.
func (s *shard) halfOut(x, postNorm backend.Tensor) error {
	if postNorm != nil {
		if err := s.be.RMSNorm(x, x, postNorm, float32(s.cfg.NormEps)); err != nil {
			return err
		}
	}
	if rs := s.cfg.ResidualScale; rs > 0 {
		return s.be.Scale(x, float32(rs))
	}
	return nil
}

// attentionScale returns the scale of c's attention scores: Config.AttnScale, else
// 1/sqrt(HeadDim).
func attentionScale(c format.Config) float32 {
	if c.AttnScale > 0 {
		return float32(c.AttnScale)
	}
	return float32(1 / math.Sqrt(float64(c.HeadDim)))
}

// localRopeConfig returns the config whose rotary frequencies the windowed layers use
// when they differ from the global layers' (Gemma 3: base RopeThetaLocal, no scaling).
func localRopeConfig(c format.Config) (format.Config, bool) {
	if c.RopeThetaLocal <= 0 || c.SlidingWindow <= 0 {
		return c, false
	}
	c.RopeTheta, c.Scaling = c.RopeThetaLocal, format.RopeScaling{}
	return c, true
}

// softcapAll soft-caps logits in place: v -> c * tanh(v / c).
func softcapAll(logits []float32, c float32) {
	for i, v := range logits {
		logits[i] = softcap(v, c)
	}
}

// softcap returns c * tanh(v / c), computed in float64.
func softcap(v, c float32) float32 {
	return float32(float64(c) * math.Tanh(float64(v)/float64(c)))
}
