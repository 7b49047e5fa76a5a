package train

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Layer holds one transformer block's weights, each a row-major [out][in] matrix (norms
// are vectors).
type Layer struct {
	AttnNorm, Wq, Wk, Wv, Wo []float32
	FFNNorm, Gate, Up, Down  []float32
}

// Model is a student's weights in float32. Head is nil when the config ties it to Embed.
type Model struct {
	Config  Config
	Embed   []float32 // [vocab][dim]
	Layers  []Layer
	OutNorm []float32 // [dim]
	Head    []float32 // [vocab][dim], nil when tied
}

// Param is one trainable tensor: its GGUF name, shape (outermost first) and values.
// Decay says whether AdamW's weight decay applies (matrices yes, norm gains no).
type Param struct {
	Name  string
	Shape []int
	W     []float32
	Decay bool
}

// Params lists the model's tensors in a fixed order, named as in GGUF.
func (m *Model) Params() []Param {
	c := m.Config
	hd := c.HeadDim()
	ps := []Param{{"token_embd.weight", []int{c.Vocab, c.Dim}, m.Embed, true}}
	for i := range m.Layers {
		l := &m.Layers[i]
		b := fmt.Sprintf("blk.%d.", i)
		ps = append(ps,
			Param{b + "attn_norm.weight", []int{c.Dim}, l.AttnNorm, false},
			Param{b + "attn_q.weight", []int{c.Heads * hd, c.Dim}, l.Wq, true},
			Param{b + "attn_k.weight", []int{c.KVHeads * hd, c.Dim}, l.Wk, true},
			Param{b + "attn_v.weight", []int{c.KVHeads * hd, c.Dim}, l.Wv, true},
			Param{b + "attn_output.weight", []int{c.Dim, c.Heads * hd}, l.Wo, true},
			Param{b + "ffn_norm.weight", []int{c.Dim}, l.FFNNorm, false},
			Param{b + "ffn_gate.weight", []int{c.Hidden, c.Dim}, l.Gate, true},
			Param{b + "ffn_up.weight", []int{c.Hidden, c.Dim}, l.Up, true},
			Param{b + "ffn_down.weight", []int{c.Dim, c.Hidden}, l.Down, true})
	}
	ps = append(ps, Param{"output_norm.weight", []int{c.Dim}, m.OutNorm, false})
	if m.Head != nil {
		ps = append(ps, Param{"output.weight", []int{c.Vocab, c.Dim}, m.Head, true})
	}
	return ps
}

// NumParams counts the model's weights.
func (m *Model) NumParams() int {
	n := 0
	for _, p := range m.Params() {
		n += len(p.W)
	}
	return n
}

// NewModel returns a model of config c with GPT-2's initialization: normal weights of
// standard deviation 0.02 (the output projections of each block scaled by
// 1/sqrt(2 layers)), norm gains 1. The same seed gives the same weights.
func NewModel(c Config, seed uint64) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	hd := c.HeadDim()
	normal := func(n int, std float64) []float32 {
		w := make([]float32, n)
		for i := range w {
			w[i] = float32(rng.NormFloat64() * std)
		}
		return w
	}
	ones := func(n int) []float32 {
		w := make([]float32, n)
		for i := range w {
			w[i] = 1
		}
		return w
	}
	const std = 0.02
	resid := std / math.Sqrt(2*float64(c.Layers))
	m := &Model{Config: c, Embed: normal(c.Vocab*c.Dim, std)}
	for range c.Layers {
		m.Layers = append(m.Layers, Layer{
			AttnNorm: ones(c.Dim),
			Wq:       normal(c.Heads*hd*c.Dim, std),
			Wk:       normal(c.KVHeads*hd*c.Dim, std),
			Wv:       normal(c.KVHeads*hd*c.Dim, std),
			Wo:       normal(c.Dim*c.Heads*hd, resid),
			FFNNorm:  ones(c.Dim),
			Gate:     normal(c.Hidden*c.Dim, std),
			Up:       normal(c.Hidden*c.Dim, std),
			Down:     normal(c.Dim*c.Hidden, resid),
		})
	}
	m.OutNorm = ones(c.Dim)
	if !c.TiedHead() {
		m.Head = normal(c.Vocab*c.Dim, std)
	}
	return m, nil
}

// zeroLike returns a model of the same shapes with every weight 0: a gradient buffer.
func (m *Model) zeroLike() *Model { return m.shapedLike() }

// head returns the LM head's [vocab][dim] matrix: its own or the embedding table.
func (m *Model) head() []float32 {
	if m.Head != nil {
		return m.Head
	}
	return m.Embed
}
