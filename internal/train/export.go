package train

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// FormatConfig returns the model's hyperparameters as a format.Config of the "llama"
// architecture in the interleaved rotary layout (the layout this package trains in).
func (m *Model) FormatConfig() format.Config {
	c := m.Config
	return format.Config{
		Arch: "llama", VocabSize: c.Vocab, Dim: c.Dim, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads,
		HeadDim: c.HeadDim(), FFNDim: c.Hidden, ContextLen: c.Ctx, NormEps: c.NormEps, RopeTheta: c.RopeTheta,
		RopeDim: c.HeadDim(), RopeStyle: format.RopeInterleaved, TiedEmbeddings: c.TiedHead(),
	}
}

// Write writes the model to path with the vocabulary and chat template given (the
// teacher's): a GGUF file when path ends in ".gguf", else a Hugging Face folder (which must
// not exist yet). Weights are F32. Nothing partial is left behind: a GGUF file is renamed
// into place when complete, a folder is filled beside its final name and then renamed.
func (m *Model) Write(path, name string, vocab *tokenizer.Vocab, chatTemplate string, progress func(done, total int64)) error {
	cfg := m.FormatConfig()
	contents := format.Contents{Name: name, Config: cfg, Vocab: vocab, ChatTemplate: chatTemplate}
	gguf := filepath.Ext(path) == ".gguf"
	var tensors []format.OutTensor
	for _, p := range m.Params() {
		w := p.W
		if heads := qkHeadCount(p.Name, m.Config); heads > 0 && !gguf {
			w = permuteHeads(w, heads, m.Config.HeadDim(), m.Config.Dim, false)
		}
		data := make([]byte, 4*len(w))
		if err := quant.Quantize(quant.F32, w, data); err != nil {
			return err
		}
		tensors = append(tensors, format.OutTensor{Name: p.Name, Type: quant.F32, Shape: p.Shape, Data: data})
	}
	if gguf {
		return format.WriteGGUF(path, contents, quant.F32, tensors, progress)
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("write %s: already exists (a Hugging Face folder is written only where none is)", path)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	cfg.RopeStyle = format.RopeNeox
	contents.Config = cfg
	if err := format.WriteHF(tmp, contents, quant.F32, tensors, 0, progress); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if vocab != nil {
		if err := format.WriteHFTokenizer(tmp, vocab, chatTemplate); err != nil {
			os.RemoveAll(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return nil
}

// qkHeadCount returns the heads of a q or k projection (whose rows a rotary layout
// orders), 0 for other tensors.
func qkHeadCount(name string, c Config) int {
	switch filepath.Ext(name[:len(name)-len(".weight")]) {
	case ".attn_q":
		return c.Heads
	case ".attn_k":
		return c.KVHeads
	}
	return 0
}

// permuteHeads returns the rows of w ([heads*hd][cols]) reordered within each head
// between the interleaved rotary layout (pairs 2i, 2i+1) and the NeoX one (pairs i,
// i+hd/2); toInterleaved selects the direction.
func permuteHeads(w []float32, heads, hd, cols int, toInterleaved bool) []float32 {
	out := make([]float32, len(w))
	for h := 0; h < heads; h++ {
		for r := 0; r < hd; r++ {
			src := format.NeoxToInterleaved(r, hd) // NeoX row r comes from this interleaved row
			if toInterleaved {
				src = format.InterleavedToNeox(r, hd)
			}
			copy(out[(h*hd+r)*cols:(h*hd+r+1)*cols], w[(h*hd+src)*cols:(h*hd+src+1)*cols])
		}
	}
	return out
}

// FromFormat returns a trainable copy (float32) of an opened model, which must be a plain
// Llama: no biases, no q/k norms, no experts, no extra scalings. Its q/k rows are brought
// into the interleaved rotary layout. ctx is the training window.
func FromFormat(fm *format.Model, ctx int) (*Model, error) {
	fc := fm.Config
	switch {
	case fc.Arch != "llama":
		return nil, fmt.Errorf("student %s: architecture %q: only llama models can be trained", fm.Path, fc.Arch)
	case fc.QKVBias || fc.QKNorm || fc.Experts > 0 || fc.PostNorms || fc.NoPreNorms || fc.EmbedScale > 0 ||
		fc.AttnScale > 0 || fc.AttnSoftcap > 0 || fc.FinalSoftcap > 0 || fc.SlidingWindow > 0 || fc.Scaling.Type != "" ||
		(fc.ResidualScale != 0 && fc.ResidualScale != 1) || (fc.LogitScale != 0 && fc.LogitScale != 1) ||
		(fc.Activation != "" && fc.Activation != "silu"):
		return nil, fmt.Errorf("student %s: only a plain Llama (RMSNorm, rotary attention, SwiGLU, no biases or extra scalings) can be trained", fm.Path)
	case fc.Heads <= 0 || fc.HeadDim*fc.Heads != fc.Dim || fc.RopeDim != fc.HeadDim:
		return nil, fmt.Errorf("student %s: heads of %d x %d in a dim of %d with %d rotary dimensions: only head size = dim/heads, fully rotated, is supported", fm.Path, fc.Heads, fc.HeadDim, fc.Dim, fc.RopeDim)
	}
	tied := fc.TiedEmbeddings
	c := Config{Dim: fc.Dim, Layers: fc.Layers, Heads: fc.Heads, KVHeads: fc.KVHeads, Hidden: fc.FFNDim, Ctx: ctx,
		NormEps: fc.NormEps, RopeTheta: fc.RopeTheta, Tied: &tied, Vocab: fc.VocabSize}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("student %s: %w", fm.Path, err)
	}
	m := &Model{Config: c}
	*m = *m.shapedLike()
	for _, p := range m.Params() {
		name := p.Name
		if name == "token_embd.weight" && tied {
			if _, ok := fm.Tensor(name); !ok {
				name = "output.weight" // a tied head stored under the head's name only
			}
		}
		t, ok := fm.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("student %s: no tensor %s", fm.Path, name)
		}
		if t.Elements() != len(p.W) {
			return nil, fmt.Errorf("student %s: tensor %s has %d values, want %d", fm.Path, name, t.Elements(), len(p.W))
		}
		if err := quant.Dequantize(t.Type, t.Data, p.W); err != nil {
			return nil, fmt.Errorf("student %s: tensor %s: %w", fm.Path, name, err)
		}
		if heads := qkHeadCount(p.Name, c); heads > 0 && fc.RopeStyle == format.RopeNeox {
			copy(p.W, permuteHeads(p.W, heads, c.HeadDim(), c.Dim, true))
		}
	}
	return m, nil
}

// shapedLike returns a zeroed model of m.Config's shapes.
func (m *Model) shapedLike() *Model {
	c := m.Config
	hd := c.HeadDim()
	z := &Model{Config: c, Embed: make([]float32, c.Vocab*c.Dim), OutNorm: make([]float32, c.Dim)}
	for range c.Layers {
		z.Layers = append(z.Layers, Layer{
			AttnNorm: make([]float32, c.Dim), Wq: make([]float32, c.Heads*hd*c.Dim),
			Wk: make([]float32, c.KVHeads*hd*c.Dim), Wv: make([]float32, c.KVHeads*hd*c.Dim), Wo: make([]float32, c.Dim*c.Heads*hd),
			FFNNorm: make([]float32, c.Dim), Gate: make([]float32, c.Hidden*c.Dim),
			Up: make([]float32, c.Hidden*c.Dim), Down: make([]float32, c.Dim*c.Hidden),
		})
	}
	if !c.TiedHead() {
		z.Head = make([]float32, c.Vocab*c.Dim)
	}
	return z
}
