package encoder

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Sequence is one input of a forward: its token ids and, for a pair of texts, each
// token's segment (nil: segment 0 throughout).
type Sequence struct {
	Tokens []int32
	Types  []int32
}

// layer holds one block's weights on the backend; a bias or norm the architecture lacks
// is nil.
type layer struct {
	q, qb, k, kb, v, vb, o, ob backend.Tensor
	qNormW, qNormB             backend.Tensor // jina with QKNorm
	kNormW, kNormB             backend.Tensor
	attnNormW, attnNormB       backend.Tensor
	norm2W, norm2B             backend.Tensor // jina with AttnNorm2
	up, upb, gate, down, downb backend.Tensor
	outNormW, outNormB         backend.Tensor
}

// head is a cross-encoder's classifier, kept on the host in float32: it runs on one
// pooled vector per sequence, a few thousand multiply-adds.
type head struct {
	pooler, poolerBias []float32 // [dim][dim], [dim]; nil without a pooler
	cls, clsBias       []float32 // [labels][dim], [labels]
}

// Encoder is a BERT-family encoder bound to its weights on one backend. Forward may be
// called from several goroutines; calls run one at a time.
type Encoder struct {
	cfg  Config
	be   backend.Backend
	ops  backend.EncoderOps
	tok  backend.Tensor // token_embd
	pos  backend.Tensor // position_embd (nil for nomic and jina)
	typ  backend.Tensor // token_types (nil when absent)
	rope backend.Rope   // nomic's rotary embedding (InvFreq nil for the others)
	// kv is a one-block cache that RopeKVWrite is handed (nomic): the encoder's slots are
	// all -1, so nothing is written to it.
	kv   backend.KVCache
	embW backend.Tensor
	embB backend.Tensor
	lays []layer
	head *head
	up   []backend.Tensor // every tensor uploaded, for Close
	mu   sync.Mutex
}

// New uploads f's weights to be, which must implement backend.EncoderOps. f must stay
// open while the Encoder is used; pooling overrides the file's pooling when not nil.
func New(f *File, be backend.Backend, pooling *backend.PoolMode) (*Encoder, error) {
	ops, ok := be.(backend.EncoderOps)
	if !ok {
		return nil, fmt.Errorf("encoder %s: backend %s does not run encoders", f.Path, be.Name())
	}
	e := &Encoder{cfg: f.Config, be: be, ops: ops}
	if pooling != nil {
		e.cfg.Pooling = *pooling
	}
	err := be.Run(func() error {
		get := func(name string) (backend.Tensor, error) {
			t, ok := f.Tensors[name]
			if !ok {
				return nil, fmt.Errorf("tensor %s is missing", name)
			}
			u, err := be.UploadWeight(t)
			if err != nil {
				return nil, fmt.Errorf("tensor %s: %w", name, err)
			}
			e.up = append(e.up, u)
			return u, nil
		}
		var errs []error
		must := func(name string) backend.Tensor {
			t, err := get(name)
			errs = append(errs, err)
			return t
		}
		// The tensors the architecture has (and File.check held to their shapes); the
		// others of a layer's fields stay nil.
		known := map[string]bool{}
		for _, t := range tensorShapes(e.cfg, false) {
			known[t.name] = true
		}
		opt := func(name string) backend.Tensor {
			if !known[name] {
				return nil
			}
			return must(name)
		}
		c := &e.cfg
		e.tok = must("token_embd.weight")
		if c.Arch == ArchBERT {
			e.pos = must("position_embd.weight")
		}
		if c.TypeVocab > 0 {
			e.typ = must("token_types.weight")
		}
		e.embW, e.embB = must("token_embd_norm.weight"), must("token_embd_norm.bias")
		for l := range c.Layers {
			p := fmt.Sprintf("blk.%d.", l)
			w := func(s string) backend.Tensor { return must(p + s) }
			o := func(s string) backend.Tensor { return opt(p + s) }
			e.lays = append(e.lays, layer{
				q: w("attn_q.weight"), qb: o("attn_q.bias"), k: w("attn_k.weight"), kb: o("attn_k.bias"),
				v: w("attn_v.weight"), vb: o("attn_v.bias"), o: w("attn_output.weight"), ob: o("attn_output.bias"),
				qNormW: o("attn_q_norm.weight"), qNormB: o("attn_q_norm.bias"),
				kNormW: o("attn_k_norm.weight"), kNormB: o("attn_k_norm.bias"),
				attnNormW: w("attn_output_norm.weight"), attnNormB: w("attn_output_norm.bias"),
				norm2W: o("attn_norm_2.weight"), norm2B: o("attn_norm_2.bias"),
				up: w("ffn_up.weight"), upb: o("ffn_up.bias"), gate: o("ffn_gate.weight"),
				down: w("ffn_down.weight"), downb: o("ffn_down.bias"),
				outNormW: w("layer_output_norm.weight"), outNormB: w("layer_output_norm.bias"),
			})
		}
		if c.Arch == ArchNomic {
			hd := c.HeadDim()
			inv := make([]float32, hd/2)
			for i := range inv {
				inv[i] = float32(math.Pow(c.RopeTheta, -float64(2*i)/float64(hd)))
			}
			ft := &format.Tensor{Name: "rope_freqs", Type: quant.F32, Shape: []int{len(inv)}, Data: f32Bytes(inv)}
			t, err := be.UploadWeight(ft)
			if err != nil {
				return fmt.Errorf("rope frequencies: %w", err)
			}
			e.up = append(e.up, t)
			e.rope = backend.Rope{InvFreq: t, Dim: hd, NeoX: true, MScale: 1}
			if e.kv, err = be.NewKVCache(backend.KVSpec{Layers: 1, NumBlocks: 1, BlockSize: 16, KVHeads: c.Heads, HeadDim: hd, DType: quant.F32}); err != nil {
				return fmt.Errorf("rope scratch cache: %w", err)
			}
		}
		return errors.Join(errs...)
	})
	if err == nil && e.cfg.Labels > 0 {
		e.head, err = loadHead(f)
	}
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("encoder %s: %w", f.Path, err)
	}
	return e, nil
}

// loadHead decodes the classifier (and pooler) weights to float32.
func loadHead(f *File) (*head, error) {
	dec := func(name string) ([]float32, error) {
		t := f.Tensors[name]
		out := make([]float32, t.Elements())
		if err := quant.Dequantize(t.Type, t.Data, out); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
		return out, nil
	}
	h := &head{}
	var errs [4]error
	h.cls, errs[0] = dec("cls.output.weight")
	h.clsBias, errs[1] = dec("cls.output.bias")
	if f.Config.Pooler {
		h.pooler, errs[2] = dec("cls.weight")
		h.poolerBias, errs[3] = dec("cls.bias")
	}
	return h, errors.Join(errs[:]...)
}

// Config returns the encoder's hyperparameters (Pooling as New set it).
func (e *Encoder) Config() Config { return e.cfg }

// Close frees the uploaded weights.
func (e *Encoder) Close() error {
	return e.be.Run(func() error {
		var errs []error
		for _, t := range e.up {
			errs = append(errs, e.be.Free(t))
		}
		e.up = nil
		return errors.Join(errs...)
	})
}

// Forward runs the sequences through the encoder in one batch and returns each one's
// pooled hidden state (Config().Dim values). Every sequence needs 1 to MaxPositions tokens
// of ids below VocabSize (and segments below TypeVocab).
func (e *Encoder) Forward(seqs []Sequence) ([][]float32, error) {
	meta, err := e.stepMeta(seqs)
	if err != nil {
		return nil, err
	}
	dst := make([]float32, len(seqs)*e.cfg.Dim)
	e.mu.Lock()
	defer e.mu.Unlock()
	err = e.be.Run(func() error { return e.forward(meta, dst) })
	if err != nil {
		return nil, fmt.Errorf("encoder forward: %w", err)
	}
	out := make([][]float32, len(seqs))
	for i := range out {
		out[i] = dst[i*e.cfg.Dim : (i+1)*e.cfg.Dim : (i+1)*e.cfg.Dim]
	}
	return out, nil
}

// stepMeta lays the sequences out as one step: tokens back to back, positions from 0 in
// each, no KV cache slots.
func (e *Encoder) stepMeta(seqs []Sequence) (*backend.StepMeta, error) {
	if len(seqs) == 0 {
		return nil, fmt.Errorf("encoder forward: no sequences")
	}
	// One (unused) block table entry per sequence: backends check the tables' shape.
	m := &backend.StepMeta{QueryStarts: []int32{0}, MaxBlocks: 1, BlockTables: make([]int32, len(seqs))}
	anyTypes := false
	for i, s := range seqs {
		n := len(s.Tokens)
		switch {
		case n == 0:
			return nil, fmt.Errorf("encoder forward: sequence %d has no tokens", i)
		case n > e.cfg.MaxPositions:
			return nil, fmt.Errorf("encoder forward: sequence %d has %d tokens, more than the model's %d positions", i, n, e.cfg.MaxPositions)
		case s.Types != nil && len(s.Types) != n:
			return nil, fmt.Errorf("encoder forward: sequence %d has %d token types for %d tokens", i, len(s.Types), n)
		}
		for j, t := range s.Tokens {
			if t < 0 || int(t) >= e.cfg.VocabSize {
				return nil, fmt.Errorf("encoder forward: sequence %d token %d: id %d outside the vocabulary of %d", i, j, t, e.cfg.VocabSize)
			}
			m.Tokens = append(m.Tokens, t)
			m.Positions = append(m.Positions, int32(j))
			m.SlotMapping = append(m.SlotMapping, -1)
		}
		anyTypes = anyTypes || s.Types != nil
		m.QueryStarts = append(m.QueryStarts, int32(len(m.Tokens)))
		m.ContextLens = append(m.ContextLens, int32(n))
		m.MaxQueryLen, m.MaxContextLen = max(m.MaxQueryLen, n), max(m.MaxContextLen, n)
	}
	if anyTypes || e.typ != nil {
		m.TokenTypes = make([]int32, 0, len(m.Tokens))
		for i, s := range seqs {
			for _, t := range s.Types {
				if t < 0 || int(t) >= max(e.cfg.TypeVocab, 1) {
					return nil, fmt.Errorf("encoder forward: sequence %d: token type %d outside the model's %d", i, t, e.cfg.TypeVocab)
				}
			}
			if s.Types == nil {
				s.Types = make([]int32, len(s.Tokens))
			}
			m.TokenTypes = append(m.TokenTypes, s.Types...)
		}
	}
	return m, nil
}

// forward is the encoder's graph, inside Run: embeddings and their norm, then per layer
// x = LN(x + attention(x)) (jina: then LN(that + x) with AttnNorm2), x = LN(x + mlp(x)),
// then pooling. The MLP is down(gelu(up x)) for bert, down(silu(gate x) * up x) for
// nomic and down(gelu(gate x) * up x) for jina.
func (e *Encoder) forward(meta *backend.StepMeta, dst []float32) error {
	be, ops, c := e.be, e.ops, &e.cfg
	n := meta.NumTokens()
	st, err := be.UploadStep(meta)
	if err != nil {
		return err
	}
	var bufs []backend.Tensor
	defer func() {
		for _, t := range bufs {
			be.Free(t)
		}
	}()
	alloc := func(cols int) (backend.Tensor, error) {
		t, err := be.NewTensor(quant.F32, n, cols)
		if err == nil {
			bufs = append(bufs, t)
		}
		return t, err
	}
	var x, q, k, v, a, o, f, g backend.Tensor
	for _, b := range []struct {
		t    *backend.Tensor
		cols int
	}{{&x, c.Dim}, {&q, c.Dim}, {&k, c.Dim}, {&v, c.Dim}, {&a, c.Dim}, {&o, c.Dim}, {&f, c.FFNDim}} {
		if *b.t, err = alloc(b.cols); err != nil {
			return err
		}
	}
	if c.gated() {
		if g, err = alloc(c.FFNDim); err != nil {
			return err
		}
	}
	eps := float32(c.NormEps)
	linear := func(out, in, w, b backend.Tensor) error {
		if err := be.MatMul(out, in, w); err != nil || b == nil {
			return err
		}
		return be.AddBias(out, b)
	}
	if err := ops.EncoderEmbedding(x, e.tok, e.pos, e.typ, st); err != nil {
		return err
	}
	if err := ops.LayerNorm(x, x, nil, e.embW, e.embB, eps); err != nil {
		return err
	}
	scale := float32(1 / math.Sqrt(float64(c.HeadDim())))
	for i := range e.lays {
		if err := e.layer(&e.lays[i], st, linear, x, q, k, v, a, o, f, g, scale, eps); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return ops.PoolRows(dst, x, c.Pooling, st)
}

// layer runs one block on x in place (q to g are its scratch buffers).
func (e *Encoder) layer(l *layer, st backend.Step, linear func(out, in, w, b backend.Tensor) error,
	x, q, k, v, a, o, f, g backend.Tensor, scale, eps float32) error {
	ops, c := e.ops, &e.cfg
	for _, p := range [][3]backend.Tensor{{q, l.q, l.qb}, {k, l.k, l.kb}, {v, l.v, l.vb}} {
		if err := linear(p[0], x, p[1], p[2]); err != nil {
			return err
		}
	}
	if l.qNormW != nil {
		if err := ops.LayerNorm(q, q, nil, l.qNormW, l.qNormB, eps); err != nil {
			return err
		}
		if err := ops.LayerNorm(k, k, nil, l.kNormW, l.kNormB, eps); err != nil {
			return err
		}
	}
	if e.kv != nil {
		if err := e.be.RopeKVWrite(q, k, v, e.rope, e.kv, 0, st); err != nil {
			return err
		}
	}
	if err := ops.BidirectionalAttention(a, q, k, v, c.Heads, scale, c.MaxALiBi, st); err != nil {
		return err
	}
	if err := linear(o, a, l.o, l.ob); err != nil {
		return err
	}
	if err := ops.LayerNorm(o, o, x, l.attnNormW, l.attnNormB, eps); err != nil {
		return err
	}
	if l.norm2W != nil {
		if err := ops.LayerNorm(o, o, x, l.norm2W, l.norm2B, eps); err != nil {
			return err
		}
	}
	// o holds the attention half's output: the MLP's input and residual.
	if err := linear(f, o, l.up, l.upb); err != nil {
		return err
	}
	var err error
	switch c.Arch {
	case ArchNomic:
		if err = linear(g, o, l.gate, nil); err == nil {
			err = e.be.SwiGLU(f, g, f)
		}
	case ArchJina:
		if err = linear(g, o, l.gate, nil); err == nil {
			err = ops.GELUGLU(f, g, f)
		}
	default:
		err = ops.GELU(f, f)
	}
	if err != nil {
		return err
	}
	if err := linear(x, f, l.down, l.downb); err != nil {
		return err
	}
	return ops.LayerNorm(x, x, o, l.outNormW, l.outNormB, eps)
}

// Classify runs the classifier head on a pooled vector and returns its logits
// (Config().Labels of them); it fails for a model without a head.
func (e *Encoder) Classify(pooled []float32) ([]float32, error) {
	h, c := e.head, &e.cfg
	if h == nil {
		return nil, fmt.Errorf("encoder: the model has no classifier head")
	}
	if len(pooled) != c.Dim {
		return nil, fmt.Errorf("encoder classify: %d values, want %d", len(pooled), c.Dim)
	}
	x := pooled
	if h.pooler != nil {
		x = make([]float32, c.Dim)
		for i := range x {
			x[i] = float32(math.Tanh(float64(dot(h.pooler[i*c.Dim:][:c.Dim], pooled) + h.poolerBias[i])))
		}
	}
	out := make([]float32, c.Labels)
	for i := range out {
		out[i] = dot(h.cls[i*c.Dim:][:c.Dim], x) + h.clsBias[i]
	}
	return out, nil
}

func dot(a, b []float32) float32 {
	var s float64
	for i, v := range a {
		s += float64(v) * float64(b[i])
	}
	return float32(s)
}

// tensorShape is a named tensor's shape, outermost first.
type tensorShape struct {
	name  string
	shape []int
}

// tensorShapes lists the tensors of an encoder of c with their shapes: as a file holds
// them (fused true) or as an opened File does (nomic's attn_qkv split into attn_q, attn_k
// and attn_v).
func tensorShapes(c Config, fused bool) []tensorShape {
	d, ff := c.Dim, c.FFNDim
	var out []tensorShape
	add := func(name string, shape ...int) { out = append(out, tensorShape{name, shape}) }
	add("token_embd.weight", c.VocabSize, d)
	if c.Arch == ArchBERT {
		add("position_embd.weight", c.MaxPositions, d)
	}
	if c.TypeVocab > 0 {
		add("token_types.weight", c.TypeVocab, d)
	}
	add("token_embd_norm.weight", d)
	add("token_embd_norm.bias", d)
	for l := range c.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		pair := func(s string, shape ...int) {
			add(p+s+".weight", shape...)
			add(p+s+".bias", shape[0])
		}
		switch {
		case c.Arch == ArchNomic && fused:
			add(p+"attn_qkv.weight", 3*d, d)
		case c.Arch == ArchNomic:
			add(p+"attn_q.weight", d, d)
			add(p+"attn_k.weight", d, d)
			add(p+"attn_v.weight", d, d)
		default:
			pair("attn_q", d, d)
			if c.QKNorm {
				pair("attn_q_norm", d)
			}
			pair("attn_k", d, d)
			if c.QKNorm {
				pair("attn_k_norm", d)
			}
			pair("attn_v", d, d)
		}
		if c.Arch == ArchNomic {
			add(p+"attn_output.weight", d, d)
		} else {
			pair("attn_output", d, d)
		}
		pair("attn_output_norm", d)
		if c.AttnNorm2 {
			pair("attn_norm_2", d)
		}
		switch c.Arch {
		case ArchBERT:
			pair("ffn_up", ff, d)
			pair("ffn_down", d, ff)
		case ArchNomic:
			add(p+"ffn_up.weight", ff, d)
			add(p+"ffn_gate.weight", ff, d)
			add(p+"ffn_down.weight", d, ff)
		case ArchJina:
			add(p+"ffn_up.weight", ff, d)
			add(p+"ffn_gate.weight", ff, d)
			pair("ffn_down", d, ff)
		}
		pair("layer_output_norm", d)
	}
	if c.Labels > 0 {
		if c.Pooler {
			pair := func(s string, shape ...int) { add(s+".weight", shape...); add(s+".bias", shape[0]) }
			pair("cls", d, d)
		}
		add("cls.output.weight", c.Labels, d)
		add("cls.output.bias", c.Labels)
	}
	return out
}
