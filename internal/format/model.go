// Package format opens a model in any supported file format (GGUF, a Hugging Face
// safetensors folder, a llama2.c checkpoint) and presents it one way: a Config of
// hyperparameters, named tensors in GGUF naming, and the tokenizer and chat template that came
// with it.
//
// Tensor data is memory-mapped by the format readers and handed out as slices of the mapping;
// nothing is copied on load.
package format

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Tensor is one named weight as stored in a model file.
type Tensor struct {
	// Name in GGUF naming: "token_embd.weight", "blk.3.attn_q.weight", "output_norm.weight".
	Name string
	// Type is the element type of Data.
	Type quant.Type
	// Shape lists dimensions outermost first, as PyTorch and safetensors do: a weight matrix
	// of a linear layer mapping In to Out features has Shape {Out, In}, and its rows (each In
	// elements, a whole number of blocks) lie one after another in Data. GGUF files store the
	// same dimensions in the reverse order; readers reverse them.
	Shape []int
	// Data is the raw bytes in Type's block format, usually a slice of a read-only mapping.
	Data []byte
}

// Elements returns the number of elements, the product of Shape.
func (t *Tensor) Elements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Rows returns the number of rows (all dimensions but the innermost) and the row length.
func (t *Tensor) Rows() (rows, cols int) {
	if len(t.Shape) == 0 {
		return 1, 1
	}
	cols = t.Shape[len(t.Shape)-1]
	return t.Elements() / max(cols, 1), cols
}

// Check verifies that Data holds exactly the bytes that Type and Shape call for.
func (t *Tensor) Check() error {
	_, cols := t.Rows()
	rowBytes, err := t.Type.RowBytes(cols)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	rows, _ := t.Rows()
	if want := rows * rowBytes; len(t.Data) != want {
		return fmt.Errorf("tensor %q: %s %v needs %d bytes, have %d", t.Name, t.Type, t.Shape, want, len(t.Data))
	}
	return nil
}

// RopeStyle says which pairs of a head's dimensions rotary embedding rotates together.
type RopeStyle int

const (
	// RopeInterleaved rotates pairs (2i, 2i+1): Meta's Llama, llama2.c, and llama.cpp's
	// "llama" architecture (whose converter permutes the Hugging Face q/k rows into it).
	RopeInterleaved RopeStyle = iota
	// RopeNeox rotates pairs (i, i+d/2): the Hugging Face layout, used unpermuted for
	// Qwen2/Qwen3 in GGUF and for every architecture loaded from safetensors.
	RopeNeox
)

func (s RopeStyle) String() string {
	if s == RopeNeox {
		return "neox"
	}
	return "interleaved"
}

// RopeScaling describes how rotary frequencies are stretched for long contexts.
type RopeScaling struct {
	// Type is "" (none), "linear", "llama3", "yarn" or "dynamic".
	Type   string
	Factor float64
	// Llama 3 parameters.
	LowFreqFactor  float64
	HighFreqFactor float64
	// OriginalContextLen is the context the model was trained with before scaling.
	OriginalContextLen int
	// YaRN parameters.
	BetaFast, BetaSlow float64
	AttnFactor         float64
	// DeepSeek's YaRN (multi-head latent attention): cos and sin are scaled by
	// m(MScale) / m(MScaleAllDim) (AttnFactor holds it) and the attention scores by
	// m(MScaleAllDim)², where m(x) = 0.1·x·ln(Factor) + 1 (1 for x = 0).
	MScale, MScaleAllDim float64
}

// Config holds the hyperparameters of a decoder-only transformer of the Llama family.
type Config struct {
	// Arch is the GGUF architecture name: "llama" (also Mistral), "qwen2", "qwen3",
	// "qwen2moe"; Mixtral is "llama" with experts.
	Arch       string
	VocabSize  int
	Dim        int // hidden size
	Layers     int
	Heads      int
	KVHeads    int
	HeadDim    int // usually Dim / Heads
	FFNDim     int // intermediate size of the dense MLP (or of each expert when Experts > 0)
	ContextLen int
	NormEps    float64
	RopeTheta  float64
	RopeDim    int // dimensions of a head that are rotated (usually HeadDim)
	RopeStyle  RopeStyle
	Scaling    RopeScaling

	TiedEmbeddings bool // the output projection reuses token_embd.weight
	QKVBias        bool // Qwen2: biases on q, k and v projections
	QKNorm         bool // Qwen3: per-head RMSNorm of q and k

	// Mixture of experts: Experts > 0 turns each MLP into a routed set of experts.
	Experts         int
	ExpertsUsed     int
	ExpertFFNDim    int  // intermediate size of each routed expert
	SharedExpertFFN int  // Qwen2-MoE shared expert size; 0 when absent
	NormTopKProbs   bool // renormalize the chosen experts' router weights to sum to 1

	SlidingWindow int // 0 when attention is not windowed
	// SlidingWindowPattern says which layers the window applies to: 0, every layer
	// (Mistral); n > 0, every layer l with (l+1) % n != 0, so that one layer in n attends
	// globally (Gemma 2: 2, Gemma 3: 6).
	SlidingWindowPattern int
	// RopeThetaLocal, when > 0, is the rotary base of the windowed layers, whose rotary
	// embedding is then never scaled (Gemma 3's rope_local_base_freq).
	RopeThetaLocal float64

	// Gemma 2 and 3 (see gemma.go).
	//
	// Activation is the MLP's gate activation: "" or "silu" (SwiGLU), "gelu_tanh" (GeGLU).
	Activation string
	// PostNorms adds an RMSNorm of each block's attention and MLP output before it joins
	// the residual stream (attn_post_norm, ffn_post_norm).
	PostNorms bool
	// EmbedScale, when > 0, multiplies the token embeddings (Gemma: sqrt(Dim)).
	EmbedScale float64
	// AttnScale, when > 0, is the attention scores' scale in place of 1/sqrt(HeadDim)
	// (Gemma: query_pre_attn_scalar^-1/2).
	AttnScale float64
	// AttnSoftcap and FinalSoftcap, when > 0, soft-cap the attention scores and the
	// logits: s -> cap * tanh(s / cap) (Gemma 2).
	AttnSoftcap, FinalSoftcap float64

	// Granite's multipliers (see granite.go; EmbedScale and AttnScale above too), each 1
	// when 0: ResidualScale multiplies each half-block's output before it joins the
	// residual stream, LogitScale the logits (1 / logits_scaling).
	ResidualScale, LogitScale float64

	// OLMo 2 (see olmo2.go): NoPreNorms drops the norms before attention and the MLP (with
	// PostNorms set, the block's only norms follow them); QKNormFull normalizes q and k
	// over the whole projection, all heads at once, rather than head by head.
	NoPreNorms, QKNormFull bool

	// DeepSeek-V2/V3's multi-head latent attention (MLA, see deepseek2.go), set when
	// KVLoRARank > 0: q is projected through a rank of QLoRARank (0: straight from the
	// stream), keys and values through one latent of KVLoRARank shared by all heads, and
	// each head's key is QKNopeDim latent-derived dimensions followed by RopeDim rotated
	// ones (one rotated key shared by all heads), its value VHeadDim. The cache holds one
	// vector per token, the rotated key then the latent: HeadDim is RopeDim + KVLoRARank
	// and KVHeads 1, and AttnScale is the model's 1/sqrt(QKNopeDim + RopeDim).
	QLoRARank, KVLoRARank, QKNopeDim, VHeadDim int
	// LeadingDenseLayers is the number of first layers of a mixture of experts that have a
	// dense MLP of FFNDim instead (DeepSeek's first_k_dense_replace).
	LeadingDenseLayers int
	// ExpertScale, when > 0, multiplies the routed experts' weighted sum
	// (routed_scaling_factor).
	ExpertScale float64
	// DeepSeek-V3's routing (backend.BiasedRouter): ExpertSigmoid scores the experts by a
	// sigmoid of the router logits instead of a softmax, chosen with each MoE layer's
	// exp_probs_b.bias (when the file has it) added, among the ExpertGroupsUsed best of
	// ExpertGroups groups when ExpertGroups > 1.
	ExpertSigmoid                  bool
	ExpertGroups, ExpertGroupsUsed int
}

// MLA reports whether the model's attention is multi-head latent attention.
func (c *Config) MLA() bool { return c.KVLoRARank > 0 }

// MoELayer reports whether layer l's feed-forward is a mixture of experts (rather than
// the dense MLP of a model without experts or of one of its leading dense layers).
func (c *Config) MoELayer(l int) bool { return c.Experts > 0 && l >= c.LeadingDenseLayers }

// SharedExpertGated reports whether the shared expert's output is gated by a sigmoid
// (Qwen2-MoE's ffn_gate_inp_shexp) rather than added as it is (DeepSeek's).
func (c *Config) SharedExpertGated() bool { return c.SharedExpertFFN > 0 && c.Arch != "deepseek2" }

// LayerWindow returns the attention window of layer l: SlidingWindow when the layer is
// windowed, 0 when it attends to its whole context.
func (c *Config) LayerWindow(l int) int {
	if c.SlidingWindow <= 0 || (c.SlidingWindowPattern > 0 && (l+1)%c.SlidingWindowPattern == 0) {
		return 0
	}
	return c.SlidingWindow
}
