package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/lora"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// shard is the part of a model one rank runs on its backend: all of it when the model is
// not split; otherwise a slice of every layer's heads and MLP (tensor parallelism) of the
// layers of one pipeline stage. Its config describes the part: its heads, KV heads, MLP
// widths and layer count.
type shard struct {
	cfg     format.Config
	be      backend.Backend
	w       *weights[backend.Tensor]
	experts [][]backend.Expert // per layer, for mixtures of experts
	rope    backend.Rope
	// hostRope is the rope's frequencies on the host (KVCache.ShiftKeys), and
	// hostRopeLocal the windowed layers' when they differ.
	hostRope, hostRopeLocal *rope
	scale                   float32 // attention scores' scale, 1/sqrt(HeadDim)
	// ropeLocal is the rotary embedding of the windowed layers when it differs (Gemma 3's
	// RopeThetaLocal); layer0 is the model-wide index of the shard's first layer, by which
	// a layer's window is found (Config.LayerWindow).
	ropeLocal *backend.Rope
	layer0    int

	// first holds the embedding (pipeline stage 0); last the final norm and output
	// projection (the last stage); logits computes them (the last stage's tensor rank 0).
	first, last, logits bool
	// tp sums the partial outputs of the ranks of the stage (nil when not split by
	// tensor); pp passes the residual stream between stages, rank = stage (nil with one
	// stage).
	tp, pp backend.Communicator
	stage  int

	meta backend.StepMeta // the step being run, its buffers reused
	// mass and massFrom are the step's attention mass requests, one per sequence (nil
	// when none asks; see Seq.Mass).
	mass     [][]float32
	massFrom []int
	// massLayer holds each sequence's rows of mass for the layer being run (layerMass).
	massLayer [][]float32
	pad       stepPad // a padded step's arrays
	act       stepBuffers
	// lora holds the adapters' slots (nil without LoRA; see Model.EnableLoRA).
	lora *loraSlots
	// fp8 quantizes the linear layers' weights to FP8 at upload (Options.FP8).
	fp8 bool
	// afterLayer is the step's Batch.AfterLayer for this rank, called with the index of
	// one of the shard's layers (nil: none, or the model cannot; see Model.rankHooks).
	afterLayer func(l int, read LayerReader) error
}

// upload binds and uploads the part's weights and the rotary frequencies (inside Run),
// telling sent (when set) the bytes of each tensor uploaded.
func (s *shard) upload(m source, path string, sent func(n int64)) error {
	send := s.be.UploadWeight
	if s.fp8 {
		send = fp8Upload(send)
	}
	if sent != nil {
		up := send
		send = func(t *format.Tensor) (backend.Tensor, error) {
			w, err := up(t)
			sent(int64(len(t.Data)))
			return w, err
		}
	}
	parts := stageEnds(s.first, s.last, s.cfg.TiedEmbeddings)
	parts.absorbMLA = true
	w, err := bindWeights(m, s.cfg, path, parts, send)
	if err != nil {
		return err
	}
	rp, hr, err := s.uploadRope(s.cfg, w.ropeDivisors)
	if err != nil {
		return fmt.Errorf("model %s: %w", path, err)
	}
	s.w = w
	s.rope, s.hostRope = rp, hr
	if c, ok := localRopeConfig(s.cfg); ok {
		lr, lh, err := s.uploadRope(c, nil)
		if err != nil {
			return fmt.Errorf("model %s: local layers: %w", path, err)
		}
		s.ropeLocal, s.hostRopeLocal = &lr, lh
	}
	s.scale = attentionScale(s.cfg)
	s.experts = make([][]backend.Expert, len(w.layers))
	for l, lw := range w.layers {
		for _, e := range lw.experts {
			s.experts[l] = append(s.experts[l], backend.Expert{Gate: e.gate, Up: e.up, Down: e.down})
		}
	}
	return nil
}

// localRope reports whether the shard's layer l rotates with ropeLocal (a windowed layer of
// a model whose windowed layers have frequencies of their own).
func (s *shard) localRope(l int) bool {
	return s.ropeLocal != nil && s.cfg.LayerWindow(s.layer0+l) > 0
}

// uploadRope computes the rotary frequencies of c (divisors as newRope takes them) and
// uploads them; it returns the uploaded rope and its host copy.
func (s *shard) uploadRope(c format.Config, divisors []float32) (backend.Rope, *rope, error) {
	r, err := newRope(c, divisors)
	if err != nil {
		return backend.Rope{}, nil, err
	}
	data := make([]byte, 0, 4*len(r.invFreq))
	for _, f := range r.invFreq {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(f))
	}
	inv, err := s.be.UploadWeight(&format.Tensor{Name: "rope inverse frequencies", Type: quant.F32, Shape: []int{len(r.invFreq)}, Data: data})
	if err != nil {
		return backend.Rope{}, nil, err
	}
	return backend.Rope{InvFreq: inv, Dim: r.dim, NeoX: r.neox, MScale: r.mscale}, r, nil
}

// weightBytesPerToken returns the bytes of weights one decoded token reads on this rank.
func (s *shard) weightBytesPerToken() int64 {
	var n int64
	for l, lw := range s.w.layers {
		n += tensorBytes(lw.q) + tensorBytes(lw.k) + tensorBytes(lw.v) + tensorBytes(lw.o) + tensorBytes(lw.qA)
		n += tensorBytes(lw.gate) + tensorBytes(lw.up) + tensorBytes(lw.down) + factorBytes(&lw)
		if e := s.experts[l]; len(e) > 0 {
			perExpert := tensorBytes(e[0].Gate) + tensorBytes(e[0].Up) + tensorBytes(e[0].Down)
			n += tensorBytes(lw.router) + int64(s.cfg.ExpertsUsed)*perExpert
		}
		n += tensorBytes(lw.shGate) + tensorBytes(lw.shUp) + tensorBytes(lw.shDown)
	}
	if s.logits {
		n += tensorBytes(s.w.output)
	}
	return n
}

// prepare fills s.meta from a checked batch, with the slots of the adapters the batch
// names, padded to the backend's graph shape when the backend replays steps like it as
// graphs.
func (s *shard) prepare(b *Batch, blockSize int) error {
	b.fillMeta(&s.meta, blockSize)
	s.meta.LoRASlots, s.meta.LoRARanks = nil, nil
	if s.lora != nil {
		if err := s.lora.assign(b, &s.meta); err != nil {
			return err
		}
	}
	s.mass, s.massFrom = s.mass[:0], s.massFrom[:0]
	for _, q := range b.Seqs {
		s.mass, s.massFrom = append(s.mass, q.Mass), append(s.massFrom, q.MassFrom)
	}
	if !slices.ContainsFunc(s.mass, func(m []float32) bool { return m != nil }) {
		s.mass, s.massFrom = s.mass[:0], s.massFrom[:0]
	}
	// A step asking for attention mass runs eagerly (see run), so it is not padded to a
	// graph's shape: the mass is reported for the batch's own sequences and contexts.
	if g, ok := s.be.(backend.StepGrapher); ok && len(s.mass) == 0 {
		s.padStep(g, blockSize)
	}
	return nil
}

// graphOwner names the buffers a captured step uses, the shard's (weights, activations)
// and the cache's, whether the step ends with the output norm and the logits rows'
// gather (out), which a step without output leaves out, and whether it runs the adapters'
// updates (lora: their ops read the slots' weights in place, which paging rewrites
// between replays).
type graphOwner struct {
	s      *shard
	kv     backend.KVCache
	out    bool
	hidden bool // the rows are read back as they are, without the logit scale
	lora   bool
}

// stepOut is where a step's output goes: of the step's first n logits rows, the logits
// (logits, F32 n x vocabulary), or the greedy token ids (ids), or tokens drawn on the
// device with each row's settings (ids and rows). masks, when set, are the rows'
// vocabulary masks for ids (see backend.ArgmaxLogits). hidden, in place of them, takes the
// rows' final hidden states (after the output norm; F32 n x Dim).
type stepOut struct {
	n      int
	logits []float32
	ids    []int32
	rows   []backend.SampleRow
	masks  [][]uint32
	hidden []float32
}

// wants reports whether the shard writes out: it computes the logits and rows are asked.
func (s *shard) wants(out stepOut) bool {
	return s.logits && out.n > 0 && (out.logits != nil || out.ids != nil || out.hidden != nil)
}

// run runs the step described by s.meta on the backend and writes its output to out:
// forward, then output, in one Run. With masks set (and an output to write) they are two
// Runs, and masks is called between them on the calling goroutine, once the layers are
// queued, so that a device runs them while the caller computes the masks; its error
// comes back as a *maskError.
func (s *shard) run(kv backend.KVCache, out stepOut, masks MaskFunc) error {
	if masks == nil || !s.wants(out) {
		return s.be.Run(func() error {
			if err := s.forward(kv, out); err != nil {
				return err
			}
			return s.output(out)
		})
	}
	if err := s.be.Run(func() error { return s.forward(kv, out) }); err != nil {
		return err
	}
	ms, err := masks()
	if err == nil && ms != nil && len(ms) != out.n {
		err = fmt.Errorf("%d masks for %d logits rows", len(ms), out.n)
	}
	if err != nil {
		return &maskError{err: err}
	}
	out.masks = ms
	return s.be.Run(func() error { return s.output(out) })
}

// forward queues the layers of the step described by s.meta on the backend (inside Run),
// up to the rows whose logits out wants (nothing of them when the shard does not compute
// the logits). Every op reads and writes buffers that exist before the step: a device
// backend can replay them as a graph.
//
// A stage after the first receives the residual stream (x and the pending block output)
// from the stage before instead of embedding the tokens, and a stage before the last
// sends it on instead of computing logits.
func (s *shard) forward(kv backend.KVCache, out stepOut) error {
	be, eps := s.be, float32(s.cfg.NormEps)
	a, err := s.act.forStep(s, s.meta.NumTokens(), len(s.meta.LogitsIndices))
	if err != nil {
		return err
	}
	if s.lora != nil {
		if err := s.lora.pageIn(be); err != nil {
			return err
		}
	}
	st, err := be.UploadStep(&s.meta)
	if err != nil {
		return err
	}
	wantOut := s.wants(out)
	ops := func() error {
		if s.first {
			if err := be.Embedding(a.x, s.w.embd, st); err != nil {
				return fmt.Errorf("embedding: %w", err)
			}
			if sc := s.cfg.EmbedScale; sc > 0 {
				if err := be.Scale(a.x, float32(sc)); err != nil {
					return fmt.Errorf("embedding scale: %w", err)
				}
			}
		} else if err := s.receive(a); err != nil {
			return err
		}
		for l := range s.w.layers {
			if err := s.layer(l, a, kv, st); err != nil {
				return fmt.Errorf("layer %d: %w", l, err)
			}
			if s.afterLayer != nil {
				if err := s.afterLayer(l, s.layerReader(kv, l)); err != nil {
					return fmt.Errorf("layer %d: after-layer hook: %w", l, err)
				}
			}
		}
		if !s.last {
			return s.sendOn(a)
		}
		if !wantOut {
			return nil
		}
		// The last block's output joins the residual stream; the final norm follows, and
		// only the rows whose logits are wanted are projected onto the vocabulary.
		if err := be.RMSNormResidual(a.xb, a.x, a.ffnOut, s.w.outNorm, eps); err != nil {
			return fmt.Errorf("output norm: %w", err)
		}
		if err := be.GatherRows(a.last, a.xb, st); err != nil {
			return fmt.Errorf("logits rows: %w", err)
		}
		if ls := s.cfg.LogitScale; ls > 0 && out.hidden == nil {
			// The output projection is linear: scaling its input scales the logits.
			if err := be.Scale(a.last, float32(ls)); err != nil {
				return fmt.Errorf("logit scale: %w", err)
			}
		}
		return nil
	}
	// A step that reads attention mass back to the host, or calls a hook after each
	// layer, runs eagerly: a graph cannot.
	if g, ok := be.(backend.StepGrapher); ok && len(s.mass) == 0 && s.afterLayer == nil {
		return g.RunStep(st, graphOwner{s: s, kv: kv, out: wantOut, hidden: out.hidden != nil, lora: s.stepLoRA()}, ops)
	}
	return ops()
}

// layerReader returns the LayerReader of layer l of kv for an after-layer hook (inside
// Run, so the backend's reader is called directly).
func (s *shard) layerReader(kv backend.KVCache, l int) LayerReader {
	lr := s.be.(backend.LayerKVReader)
	return func(blocks []int32, dst []byte) (func() error, error) { return lr.ReadLayerBlocks(kv, l, blocks, dst) }
}

// output projects the rows forward left in the activations onto the vocabulary and
// writes out (inside Run, after forward): the step's last op and its only host
// synchronisation. It does nothing when the shard does not write out.
func (s *shard) output(out stepOut) error {
	if !s.wants(out) {
		return nil
	}
	be, last := s.be, s.act.current.last
	if out.n < len(s.meta.LogitsIndices) {
		last = last.Rows(out.n)
	}
	var err error
	switch {
	case out.hidden != nil:
		err = be.(backend.RowReader).ReadRows(out.hidden, last)
	case out.rows != nil:
		rows := out.rows
		if out.masks != nil {
			rows = slices.Clone(rows)
			for i := range rows {
				rows[i].Mask = out.masks[i]
			}
		}
		err = be.(backend.LogitsSampler).LogitsSample(out.ids, last, s.w.output, rows)
	case out.ids != nil:
		err = be.(backend.ArgmaxLogits).LogitsArgmax(out.ids, last, s.w.output, out.masks)
	default:
		err = be.Logits(out.logits, last, s.w.output)
		if c := s.cfg.FinalSoftcap; c > 0 && err == nil {
			softcapAll(out.logits[:out.n*s.cfg.VocabSize], float32(c))
		}
	}
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	return nil
}

// receive takes the residual stream from the previous pipeline stage.
func (s *shard) receive(a *activations) error {
	if err := s.pp.Recv(a.x, s.stage-1); err != nil {
		return fmt.Errorf("receive from stage %d: %w", s.stage-1, err)
	}
	if err := s.pp.Recv(a.ffnOut, s.stage-1); err != nil {
		return fmt.Errorf("receive from stage %d: %w", s.stage-1, err)
	}
	return nil
}

// sendOn passes the residual stream to the next pipeline stage.
func (s *shard) sendOn(a *activations) error {
	if err := s.pp.Send(a.x, s.stage+1); err != nil {
		return fmt.Errorf("send to stage %d: %w", s.stage+1, err)
	}
	if err := s.pp.Send(a.ffnOut, s.stage+1); err != nil {
		return fmt.Errorf("send to stage %d: %w", s.stage+1, err)
	}
	return nil
}

// reduce sums a block's partial output over the ranks of a tensor-parallel stage: each
// rank's heads (or MLP columns) contributed one term of the output projection.
func (s *shard) reduce(t backend.Tensor) error {
	if s.tp == nil {
		return nil
	}
	if err := s.tp.AllReduceSum(t); err != nil {
		return fmt.Errorf("all-reduce: %w", err)
	}
	return nil
}

// layer runs transformer block l: pre-norm attention, then a pre-norm feed-forward. Each
// half leaves its output in a.ffnOut, which the next fused norm adds to the residual
// stream a.x.
func (s *shard) layer(l int, a *activations, kv backend.KVCache, st backend.Step) error {
	be, lw, eps := s.be, &s.w.layers[l], float32(s.cfg.NormEps)
	var err error
	in := a.xb // each half's input: the normalized stream, or the stream itself
	switch {
	case s.cfg.NoPreNorms:
		in = a.x
		err = s.joinResidual(a, l == 0 && s.first)
	case l == 0 && s.first:
		err = be.RMSNorm(a.xb, a.x, lw.attnNorm, eps)
	default:
		err = be.RMSNormResidual(a.xb, a.x, a.ffnOut, lw.attnNorm, eps)
	}
	if err != nil {
		return err
	}
	if err := s.attention(l, a, in, kv, st); err != nil {
		return err
	}
	if err := s.halfOut(a.ffnOut, lw.attnPostNorm); err != nil {
		return err
	}
	if s.cfg.NoPreNorms {
		err = s.joinResidual(a, false)
	} else {
		err = be.RMSNormResidual(a.xb, a.x, a.ffnOut, lw.ffnNorm, eps)
	}
	if err != nil {
		return err
	}
	switch {
	case s.cfg.MoELayer(l):
		err = s.moe(l, a)
	case s.stepLoRA():
		err = s.mlpLoRA(l, a.ffnOut, in, a, st)
	default:
		err = s.mlp(a.ffnOut, in, a, lw)
	}
	if err != nil {
		return err
	}
	if err := s.reduce(a.ffnOut); err != nil {
		return err
	}
	return s.halfOut(a.ffnOut, lw.ffnPostNorm)
}

// attention is the attention half of block l on the rows in (the normalized a.xb, or a.x
// itself for a block without pre-norms): projections,
// (biases, QK norm,) rotary embedding fused with the cache write, paged attention, and the
// output projection into a.ffnOut, summed over the tensor-parallel ranks.
func (s *shard) attention(l int, a *activations, in backend.Tensor, kv backend.KVCache, st backend.Step) error {
	be, lw, c := s.be, &s.w.layers[l], s.cfg
	if c.MLA() {
		return s.mlaAttention(l, a, in, kv, st)
	}
	if err := s.projectLinear([]backend.Tensor{a.q, a.k, a.v}, in, a, lw, qkvNames, []backend.Tensor{lw.q, lw.k, lw.v}); err != nil {
		return err
	}
	if err := s.addLoRAs(l, []lora.Target{lora.Q, lora.K, lora.V}, []backend.Tensor{a.q, a.k, a.v}, in, a, st); err != nil {
		return err
	}
	if c.QKVBias {
		if err := be.AddBias(a.q, lw.qBias); err != nil {
			return err
		}
		if err := be.AddBias(a.k, lw.kBias); err != nil {
			return err
		}
		if err := be.AddBias(a.v, lw.vBias); err != nil {
			return err
		}
	}
	if c.QKNormFull && s.tp != nil {
		if err := s.splitQKNorm(a, lw); err != nil {
			return err
		}
	} else if c.QKNorm {
		norm := be.HeadNorm
		if c.QKNormFull {
			norm = func(x, w backend.Tensor, eps float32) error { return be.RMSNorm(x, x, w, eps) }
		}
		if err := norm(a.q, lw.qNorm, float32(c.NormEps)); err != nil {
			return err
		}
		if err := norm(a.k, lw.kNorm, float32(c.NormEps)); err != nil {
			return err
		}
	}
	window := c.LayerWindow(s.layer0 + l)
	rope := s.rope
	if s.localRope(l) {
		rope = *s.ropeLocal
	}
	if err := be.RopeKVWrite(a.q, a.k, a.v, rope, kv, l, st); err != nil {
		return err
	}
	var err error
	if window > 0 || c.AttnSoftcap > 0 {
		opt := backend.AttentionOptions{Scale: s.scale, Window: window, Softcap: float32(c.AttnSoftcap)}
		err = be.AttentionWith(a.att, a.q, kv, l, opt, st)
	} else {
		err = be.Attention(a.att, a.q, kv, l, s.scale, st)
	}
	if err != nil {
		return err
	}
	if len(s.mass) > 0 {
		// Checked by Model.check: the backend reports mass.
		if err := be.(backend.AttentionMasser).AttentionMass(s.layerMass(l), s.massFrom, a.q, kv, l, s.scale, st); err != nil {
			return err
		}
	}
	if err := s.linear(a.ffnOut, a.att, a, lw, "attn_output", lw.o); err != nil {
		return err
	}
	if err := s.addLoRA(l, lora.O, a.ffnOut, a.att, a, st); err != nil {
		return err
	}
	return s.reduce(a.ffnOut)
}

// mlp computes the SwiGLU feed-forward out = down(silu(gate·x) * up·x), with a.gate and
// a.up as scratch.
func (s *shard) mlp(out, x backend.Tensor, a *activations, lw *layerWeights[backend.Tensor]) error {
	be := s.be
	if s.cfg.Activation == geluTanh {
		return s.geglu(out, x, a, lw)
	}
	gateUp := []backend.Tensor{lw.gate, lw.up}
	if f, ok := be.(backend.SwiGLUMatMuler); ok && lw.lowRank["ffn_gate"] == nil && lw.lowRank["ffn_up"] == nil {
		if err := f.MatMulSwiGLU(a.gate, x, lw.gate, lw.up); err != nil {
			return err
		}
	} else {
		if err := s.projectLinear([]backend.Tensor{a.gate, a.up}, x, a, lw, gateUpNames, gateUp); err != nil {
			return err
		}
		if err := be.SwiGLU(a.gate, a.gate, a.up); err != nil {
			return err
		}
	}
	return s.linear(out, a.gate, a, lw, "ffn_down", lw.down)
}

// The names of the matrices projected together, as layerWeights.lowRank keys them.
var (
	qkvNames    = []string{"attn_q", "attn_k", "attn_v"}
	gateUpNames = []string{"ffn_gate", "ffn_up"}
)

// project computes outs[i] = x · ws[i]ᵀ: in one pass when the backend can
// (backend.MultiMatMuler), else one MatMul each.
func (s *shard) project(outs []backend.Tensor, x backend.Tensor, ws []backend.Tensor) error {
	if f, ok := s.be.(backend.MultiMatMuler); ok {
		return f.MatMuls(outs, x, ws)
	}
	for i, w := range ws {
		if err := s.be.MatMul(outs[i], x, w); err != nil {
			return err
		}
	}
	return nil
}

// layerMass returns each asking sequence's rows of attention mass for layer l (Seq.Mass
// holds every layer's KV heads' rows, layer after layer; Batch.check saw that they divide
// evenly), nil for the others.
func (s *shard) layerMass(l int) [][]float32 {
	s.massLayer = s.massLayer[:0]
	for _, m := range s.mass {
		if m != nil {
			per := len(m) / s.cfg.Layers
			m = m[l*per : (l+1)*per]
		}
		s.massLayer = append(s.massLayer, m)
	}
	return s.massLayer
}
