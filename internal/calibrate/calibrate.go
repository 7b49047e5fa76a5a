// Package calibrate runs a model over calibration text one layer at a time, in float32, and
// shows every linear layer's input to a visitor before the layer is applied: what
// post-training quantizers (GPTQ, AWQ, importance matrices) learn from.
//
// All sequences go through layer l before any goes through layer l+1, so only one layer's
// weights (as dense float32 copies) and one set of activations are held at a time. A
// visitor may replace the weights of the stage it is shown (with their quantized values,
// say), and the run goes on with them: later layers then see the inputs the quantized
// model would give them, as GPTQ's sequential mode wants.
package calibrate

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// StageKind names where in a transformer block a stage's input is taken.
type StageKind int

const (
	// AttnInput is the attention norm's output, read by the q, k and v projections.
	AttnInput StageKind = iota
	// AttnOutput is the attention's output, read by the output projection.
	AttnOutput
	// FFNInput is the feed-forward norm's output, read by the gate and up projections.
	FFNInput
	// FFNOutput is silu(gate) * up, read by the down projection.
	FFNOutput
)

func (k StageKind) String() string {
	return [...]string{"attn_input", "attn_output", "ffn_input", "ffn_output"}[k]
}

// Dense is a weight matrix or vector held as float32, row-major: Rows rows of Cols values.
type Dense struct {
	Name       string
	Rows, Cols int
	Data       []float32
}

// Row returns row r.
func (d *Dense) Row(r int) []float32 { return d.Data[r*d.Cols : (r+1)*d.Cols] }

// Stage is one input shown to a visitor: the tokens' activations that the stage's linear
// layers read, those layers' weights, and where the input came from.
type Stage struct {
	Layer int
	Kind  StageKind
	// Input holds Tokens rows of Input.Cols values: row t is token t's input.
	Input  *Dense
	Tokens int
	// Linear are the weights that read Input (q, k, v; o; gate, up; down), in that order.
	Linear []*Dense
	// Norm is the RMSNorm weight Input was normalized with (AttnInput, FFNInput), and
	// Producer the linear layer whose output rows are Input's columns (v for AttnOutput,
	// up for FFNOutput); nil otherwise. A visitor that rescales Input's columns (AWQ) folds
	// the inverse into one of them and must rescale Input to match.
	Norm, Producer *Dense
	// ProducerBias is the v bias of a model with QKV biases (AttnOutput), else nil.
	ProducerBias *Dense
	// KVGroup is the number of query heads sharing one key/value head and HeadDim their
	// size (AttnOutput): Input's column h*HeadDim+e comes from the value row
	// (h/KVGroup)*HeadDim+e.
	KVGroup, HeadDim int
	// Down is the down projection that reads silu(gate) * up (FFNInput), so that a
	// visitor can measure the feed-forward block's output rather than gate's and up's;
	// nil otherwise. A visitor must not change it.
	Down *Dense
	// Attention returns the attention block's output, o(attention(rope(q x), rope(k x),
	// v x)) with the layer's o in float, for inputs x of whole sequences (the first rows
	// of Input, or those rows rescaled) and the weights q, k, v (AttnInput; nil
	// otherwise): a visitor's measure of the block's output rather than of q's, k's and
	// v's.
	Attention func(x []float32, q, k, v *Dense) ([]float32, error)
	// SeqLen is the calibration sequences' length: Input's rows are Tokens/SeqLen
	// sequences of SeqLen tokens, one after another.
	SeqLen int
	// TokenWeight returns, for each of the Tokens rows, 1/ms of the residual stream
	// once the stage's block (attention for AttnInput and AttnOutput, feed-forward for
	// FFNInput and FFNOutput) has added its output, with the block's weights as the stage
	// was shown them, ms the mean square the next RMSNorm divides by; scaled to a mean of
	// 1. An error e in a token's block output reaches the next normalized input as about
	// e/rms, so sum_t w_t |e_t|^2 is the error the later layers see; tokens whose
	// residual stream carries tens of times the others' energy (the first of each
	// sequence) weigh little in it. It is computed on the first call (one more pass of
	// the block) and shared by the block's two stages; nil where unknown.
	TokenWeight func() ([]float32, error)
}

// Visitor is shown each stage in order. It may change the stage's Linear weights, its
// Norm or Producer, provided Input stays what the current weights give; the run continues
// with whatever they hold when it returns.
type Visitor func(s *Stage) error

// Check reports whether the model is one Run can calibrate: a dense Llama-family decoder
// with plain rotary embeddings.
func Check(c format.Config) error {
	switch {
	case c.Experts > 0:
		return fmt.Errorf("calibrate: mixture-of-experts models are not supported")
	case c.QKNorm:
		return fmt.Errorf("calibrate: models with q/k norms (Qwen3) are not supported")
	case c.Scaling.Type != "":
		return fmt.Errorf("calibrate: rope scaling %q is not supported", c.Scaling.Type)
	case c.SlidingWindow > 0:
		return fmt.Errorf("calibrate: sliding-window attention is not supported")
	case c.Layers <= 0 || c.Dim <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("calibrate: bad shape: %d layers, dim %d, %d heads, %d kv heads", c.Layers, c.Dim, c.Heads, c.KVHeads)
	}
	return nil
}

// Load returns a tensor of m as Dense (a vector is one row), dequantized.
func Load(m *format.Model, name string) (*Dense, error) {
	t, ok := m.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("calibrate: the model has no tensor %q", name)
	}
	rows, cols := t.Rows()
	d := &Dense{Name: name, Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	if err := quant.Dequantize(t.Type, t.Data, d.Data); err != nil {
		return nil, fmt.Errorf("calibrate: tensor %q: %w", name, err)
	}
	return d, nil
}

// Layer holds one transformer block's weights as Dense.
type Layer struct {
	AttnNorm, FFNNorm   *Dense
	Q, K, V, O          *Dense
	QBias, KBias, VBias *Dense // with QKVBias only
	Gate, Up, Down      *Dense
}

// LoadLayer loads block l's weights.
func LoadLayer(m *format.Model, l int) (*Layer, error) {
	p := fmt.Sprintf("blk.%d.", l)
	var err error
	get := func(name string) *Dense {
		if err != nil {
			return nil
		}
		var d *Dense
		d, err = Load(m, p+name)
		return d
	}
	ly := &Layer{AttnNorm: get("attn_norm.weight"), FFNNorm: get("ffn_norm.weight"),
		Q: get("attn_q.weight"), K: get("attn_k.weight"), V: get("attn_v.weight"), O: get("attn_output.weight"),
		Gate: get("ffn_gate.weight"), Up: get("ffn_up.weight"), Down: get("ffn_down.weight")}
	if m.Config.QKVBias {
		ly.QBias, ly.KBias, ly.VBias = get("attn_q.bias"), get("attn_k.bias"), get("attn_v.bias")
	}
	return ly, err
}

// Chunks cuts tokens into windows of ctx tokens, each starting with bos (unless bos < 0),
// as llama.cpp's imatrix and perplexity tools do; at most maxTokens tokens in all (0: no
// limit). A tail shorter than ctx is left out.
func Chunks(tokens []int32, ctx int, bos int32, maxTokens int) [][]int32 {
	var out [][]int32
	for start := 0; start+ctx <= len(tokens) && ctx > 0; start += ctx {
		if maxTokens > 0 && (len(out)+1)*ctx > maxTokens {
			break
		}
		w := append([]int32(nil), tokens[start:start+ctx]...)
		if bos >= 0 {
			w[0] = bos
		}
		out = append(out, w)
	}
	return out
}

// Run embeds seqs (each starting at position 0, all of one length) and passes them
// through every layer on p's threads, calling load for block l's weights, visit at each of its four
// stages, and done once the block is finished (to encode and release its weights). It
// returns the residual stream after the last block, [tokens][dim].
func Run(m *format.Model, seqs [][]int32, p *cpu.Pool, load func(l int) (*Layer, error), visit Visitor, done func(l int, ly *Layer) error) ([]float32, error) {
	c := m.Config
	if err := Check(c); err != nil {
		return nil, err
	}
	if len(seqs) == 0 || len(seqs[0]) == 0 {
		return nil, fmt.Errorf("calibrate: no calibration tokens")
	}
	seqLen := len(seqs[0])
	for _, s := range seqs {
		if len(s) != seqLen {
			return nil, fmt.Errorf("calibrate: sequences of %d and %d tokens: want one length", seqLen, len(s))
		}
	}
	embd, err := Load(m, "token_embd.weight")
	if err != nil {
		return nil, err
	}
	n := len(seqs) * seqLen
	x := make([]float32, n*c.Dim)
	for i, s := range seqs {
		for j, tok := range s {
			if tok < 0 || int(tok) >= embd.Rows {
				return nil, fmt.Errorf("calibrate: token %d outside the vocabulary of %d", tok, embd.Rows)
			}
			copy(x[(i*seqLen+j)*c.Dim:], embd.Row(int(tok)))
		}
	}
	embd = nil
	r := &runner{c: c, p: p, n: n, seqLen: seqLen, x: x}
	r.cos, r.sin = cpu.RopeTables(seqLen, c.RopeDim, c.RopeTheta)
	r.positions = make([]int32, n)
	for t := range n {
		r.positions[t] = int32(t % seqLen)
	}
	for l := range c.Layers {
		ly, err := load(l)
		if err != nil {
			return nil, err
		}
		if err := r.layer(l, ly, visit); err != nil {
			return nil, fmt.Errorf("calibrate: layer %d: %w", l, err)
		}
		if err := done(l, ly); err != nil {
			return nil, err
		}
	}
	return r.x, nil
}

type runner struct {
	c         format.Config
	p         *cpu.Pool
	n, seqLen int
	x         []float32 // the residual stream, [n][dim]
	positions []int32
	cos, sin  []float32
}

// layer runs block l on the residual stream in place.
func (r *runner) layer(l int, ly *Layer, visit Visitor) error {
	c := r.c
	n, hd := r.n, c.HeadDim
	qDim := c.Heads * hd
	eps := float32(c.NormEps)

	// Attention.
	xn := &Dense{Name: "attn_input", Rows: n, Cols: c.Dim, Data: make([]float32, n*c.Dim)}
	attnWeight := r.blockWeights(func() ([]float32, error) { return r.attentionBlock(xn.Data, ly.Q, ly.K, ly.V, ly) })
	if err := cpu.RMSNorm(r.p, xn.Data, r.x, ly.AttnNorm.Data, n, eps); err != nil {
		return err
	}
	attend := func(x []float32, wq, wk, wv *Dense) ([]float32, error) {
		return r.attentionBlock(x, wq, wk, wv, ly)
	}
	if err := visit(&Stage{Layer: l, Kind: AttnInput, Input: xn, Tokens: n, Linear: []*Dense{ly.Q, ly.K, ly.V}, Norm: ly.AttnNorm, Attention: attend, SeqLen: r.seqLen, TokenWeight: attnWeight}); err != nil {
		return err
	}
	att := &Dense{Name: "attn_output", Rows: n, Cols: qDim}
	var err error
	if att.Data, err = r.attend(xn.Data, ly.Q, ly.K, ly.V, ly); err != nil {
		return err
	}
	group := c.Heads / c.KVHeads
	if err := visit(&Stage{Layer: l, Kind: AttnOutput, Input: att, Tokens: n, Linear: []*Dense{ly.O}, Producer: ly.V, ProducerBias: ly.VBias, KVGroup: group, HeadDim: hd, TokenWeight: attnWeight}); err != nil {
		return err
	}
	o := make([]float32, n*c.Dim)
	if err := r.matMul(o, ly.O, att.Data); err != nil {
		return err
	}
	addInto(r.x, o)

	// Feed-forward.
	ffnWeight := r.blockWeights(func() ([]float32, error) { return r.ffnBlock(xn.Data, ly) })
	if err := cpu.RMSNorm(r.p, xn.Data, r.x, ly.FFNNorm.Data, n, eps); err != nil {
		return err
	}
	xn.Name = "ffn_input"
	if err := visit(&Stage{Layer: l, Kind: FFNInput, Input: xn, Tokens: n, Linear: []*Dense{ly.Gate, ly.Up}, Norm: ly.FFNNorm, Down: ly.Down, TokenWeight: ffnWeight}); err != nil {
		return err
	}
	hidden, err := r.ffnHidden(xn.Data, ly)
	if err != nil {
		return err
	}
	h := &Dense{Name: "ffn_output", Rows: n, Cols: ly.Gate.Rows, Data: hidden}
	if err := visit(&Stage{Layer: l, Kind: FFNOutput, Input: h, Tokens: n, Linear: []*Dense{ly.Down}, Producer: ly.Up, TokenWeight: ffnWeight}); err != nil {
		return err
	}
	if err := r.matMul(o, ly.Down, h.Data); err != nil {
		return err
	}
	addInto(r.x, o)
	return nil
}

// attentionBlock is the attention block's output for x, rows of whole sequences, with
// the projections wq, wk, wv and the layer's biases and o.
func (r *runner) attentionBlock(x []float32, wq, wk, wv *Dense, ly *Layer) ([]float32, error) {
	att, err := r.attend(x, wq, wk, wv, ly)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(x))
	return out, MatMul(r.p, out, ly.O, att, len(x)/r.c.Dim)
}

// attend is the attention's output (before o) for x, rows of whole sequences, with the
// projections wq, wk, wv and the layer's biases.
func (r *runner) attend(x []float32, wq, wk, wv *Dense, ly *Layer) ([]float32, error) {
	c := r.c
	n := len(x) / c.Dim
	if n == 0 || n%r.seqLen != 0 || n > r.n {
		return nil, fmt.Errorf("calibrate: attention over %d rows: want whole sequences of %d", n, r.seqLen)
	}
	hd := c.HeadDim
	q, k, v := make([]float32, n*c.Heads*hd), make([]float32, n*c.KVHeads*hd), make([]float32, n*c.KVHeads*hd)
	for _, mm := range []struct {
		out  []float32
		w, b *Dense
	}{{q, wq, ly.QBias}, {k, wk, ly.KBias}, {v, wv, ly.VBias}} {
		if err := MatMul(r.p, mm.out, mm.w, x, n); err != nil {
			return nil, err
		}
		if mm.b != nil {
			for t := range n {
				row := mm.out[t*mm.w.Rows : (t+1)*mm.w.Rows]
				for i := range row {
					row[i] += mm.b.Data[i]
				}
			}
		}
	}
	style := cpu.RopeInterleaved
	if c.RopeStyle == format.RopeNeox {
		style = cpu.RopeNeoX
	}
	if err := cpu.Rope(r.p, q, n, c.Heads, hd, c.RopeDim, r.positions[:n], r.cos, r.sin, style); err != nil {
		return nil, err
	}
	if err := cpu.Rope(r.p, k, n, c.KVHeads, hd, c.RopeDim, r.positions[:n], r.cos, r.sin, style); err != nil {
		return nil, err
	}
	att := make([]float32, n*c.Heads*hd)
	r.attention(att, q, k, v, n)
	return att, nil
}

// matMul computes out = x w^T for the run's tokens.
func (r *runner) matMul(out []float32, w *Dense, x []float32) error {
	return MatMul(r.p, out, w, x, r.n)
}

// MatMul computes out[t] = w x[t] for nTokens tokens with the CPU backend's kernels.
func MatMul(p *cpu.Pool, out []float32, w *Dense, x []float32, nTokens int) error {
	data := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.Data))), 4*len(w.Data))
	return cpu.MatMul(p, out, cpu.Weight{Type: quant.F32, Rows: w.Rows, Cols: w.Cols, Data: data}, x, nTokens)
}

// attention is causal softmax attention within each of the sequences of n tokens' q, k
// and v, the query heads of a group sharing one key/value head.
func (r *runner) attention(out, q, k, v []float32, n int) {
	c := r.c
	hd, qDim, kvDim := c.HeadDim, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	group := c.Heads / c.KVHeads
	scale := 1 / math.Sqrt(float64(hd))
	seqs := n / r.seqLen
	r.p.Run(seqs*c.Heads, func(start, end int) {
		scores := make([]float64, r.seqLen)
		for j := start; j < end; j++ {
			s, h := j/c.Heads, j%c.Heads
			base := s * r.seqLen
			off := (h / group) * hd
			for i := range r.seqLen {
				qi := q[(base+i)*qDim+h*hd:][:hd]
				hi := math.Inf(-1)
				for t := 0; t <= i; t++ {
					kt := k[(base+t)*kvDim+off:][:hd]
					var d float64
					for e := range hd {
						d += float64(qi[e]) * float64(kt[e])
					}
					scores[t] = d * scale
					hi = max(hi, scores[t])
				}
				var sum float64
				for t := 0; t <= i; t++ {
					scores[t] = math.Exp(scores[t] - hi)
					sum += scores[t]
				}
				o := out[(base+i)*qDim+h*hd:][:hd]
				clear(o)
				for t := 0; t <= i; t++ {
					w := float32(scores[t] / sum)
					vt := v[(base+t)*kvDim+off:][:hd]
					for e := range hd {
						o[e] += w * vt[e]
					}
				}
			}
		}
	})
}

// blockWeights returns a Stage.TokenWeight for the block whose output block computes:
// on its first call it adds that output to the residual stream (in a copy) and weighs
// each token by 1/(ms_t + eps), ms_t the mean square of its row, scaled to a mean of 1.
func (r *runner) blockWeights(block func() ([]float32, error)) func() ([]float32, error) {
	var w []float32
	return func() ([]float32, error) {
		if w != nil {
			return w, nil
		}
		out, err := block()
		if err != nil {
			return nil, err
		}
		dim := r.c.Dim
		inv := make([]float64, r.n)
		var sum float64
		for t := range r.n {
			var ms float64
			for i, v := range r.x[t*dim : (t+1)*dim] {
				y := float64(v) + float64(out[t*dim+i])
				ms += y * y
			}
			inv[t] = 1 / (ms/float64(dim) + r.c.NormEps)
			sum += inv[t]
		}
		w = make([]float32, r.n)
		for t, v := range inv {
			w[t] = float32(v * float64(r.n) / sum)
		}
		return w, nil
	}
}

// ffnBlock is the feed-forward block's output down(silu(gate x) * up x) for the run's
// tokens' inputs x.
func (r *runner) ffnBlock(x []float32, ly *Layer) ([]float32, error) {
	h, err := r.ffnHidden(x, ly)
	if err != nil {
		return nil, err
	}
	out := make([]float32, r.n*ly.Down.Rows)
	return out, r.matMul(out, ly.Down, h)
}

// ffnHidden is the feed-forward block's hidden activations silu(gate x) * up x, the down
// projection's input, for the run's tokens' inputs x.
func (r *runner) ffnHidden(x []float32, ly *Layer) ([]float32, error) {
	f := ly.Gate.Rows
	gate, up := make([]float32, r.n*f), make([]float32, r.n*f)
	if err := r.matMul(gate, ly.Gate, x); err != nil {
		return nil, err
	}
	if err := r.matMul(up, ly.Up, x); err != nil {
		return nil, err
	}
	for i, g := range gate {
		gate[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
	}
	return gate, nil
}

func addInto(dst, src []float32) {
	for i, v := range src {
		dst[i] += v
	}
}
