package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Multi-head latent attention (DeepSeek-V2/V3; see format/deepseek2.go for the file's
// tensors). With R = KVLoRARank and rd = RopeDim, a token's keys and values come from one
// latent c (R values, normalized) and one rotated key kr (rd values) shared by all heads:
// head h's key is [W_UK[h]·c | kr] and its value W_UV[h]·c, where W_UK[h] and W_UV[h] are
// head h's rows of attn_kv_b.
//
// The reference path decompresses every token's keys and values, head by head, and
// attends as multi-head attention does. The fast path caches only [kr | c] per token (one
// KV head of rd + R: Config.HeadDim) and never decompresses, by folding the
// up-projections into the weights once at load (the absorption of the DeepSeek-V2 paper):
//
//   - q_nope[h]·(W_UK[h]·c) = (W_UK[h]ᵀ·q_nope[h])·c, so the absorbed query matrix gives
//     each head [q_rope | W_UK[h]ᵀ·q_nope] directly from the query's input: its rows are
//     attn_q_b's rope rows and W_UK[h]ᵀ times its nope rows;
//   - the attention output of head h over the cached vectors is [Σp·kr | Σp·c], and
//     attn_output·concat_h(W_UV[h]·Σp·c) is one matrix over it: the absorbed output
//     matrix, zero on each head's rope columns.
//
// The cache vector is built from two halves of attn_kv_a_mqa padded with zero rows
// ([0 | c] and [kr | 0]), so that the latent's RMS norm (SumSquares over the whole row,
// which the zeros leave alone, then RMSNormSplit) and an Add assemble it from ops every
// backend has. The value the cache holds is the key vector itself; RopeKVWrite writes it
// twice, as the cache keeps keys and values apart.

// mlaTensors are the file's attention tensors of one layer of an MLA model.
type mlaTensors struct {
	qA, qANorm, q, kvA, kvANorm, kvB, o *format.Tensor
}

// mla binds layer lw's attention (prefix p): the file's tensors for the reference path,
// or the absorbed matrices (absorb) for the fast path.
func (b *binder[T]) mla(lw *layerWeights[T], p string, c format.Config, absorb bool) {
	hd := c.QKNopeDim + c.RopeDim
	var f mlaTensors
	if c.QLoRARank > 0 {
		f.qA = b.lookup(p+"attn_q_a.weight", c.QLoRARank, c.Dim)
		f.qANorm = b.lookup(p+"attn_q_a_norm.weight", c.QLoRARank)
		f.q = b.lookup(p+"attn_q_b.weight", c.Heads*hd, c.QLoRARank)
	} else {
		f.q = b.lookup(p+"attn_q.weight", c.Heads*hd, c.Dim)
	}
	f.kvA = b.lookup(p+"attn_kv_a_mqa.weight", c.KVLoRARank+c.RopeDim, c.Dim)
	f.kvANorm = b.lookup(p+"attn_kv_a_norm.weight", c.KVLoRARank)
	f.kvB = b.lookup(p+"attn_kv_b.weight", c.Heads*(c.QKNopeDim+c.VHeadDim), c.KVLoRARank)
	f.o = b.lookup(p+"attn_output.weight", c.Dim, c.Heads*c.VHeadDim)
	if b.err != nil {
		return
	}
	if c.QLoRARank > 0 {
		lw.qA = b.bind(f.qA, c.QLoRARank, c.Dim)
		lw.qANorm = b.bind(f.qANorm, c.QLoRARank)
	}
	if !absorb {
		lw.q = b.bind(f.q, f.q.Shape[0], f.q.Shape[len(f.q.Shape)-1])
		lw.kvA = b.bind(f.kvA, c.KVLoRARank+c.RopeDim, c.Dim)
		lw.kvANorm = b.bind(f.kvANorm, c.KVLoRARank)
		lw.kvB = b.bind(f.kvB, c.Heads*(c.QKNopeDim+c.VHeadDim), c.KVLoRARank)
		lw.o = b.bind(f.o, c.Dim, c.Heads*c.VHeadDim)
		return
	}
	ab, err := absorbMLA(c, p, &f)
	if err != nil {
		b.err = err
		return
	}
	lw.q = b.bind(ab.q, ab.q.Shape...)
	lw.k = b.bind(ab.kvLatent, ab.kvLatent.Shape...)
	lw.v = b.bind(ab.kvRope, ab.kvRope.Shape...)
	lw.kvANorm = b.bind(ab.norm, ab.norm.Shape...)
	lw.o = b.bind(ab.o, ab.o.Shape...)
}

// mlaAbsorbed are the fast path's matrices of one layer (F32): the absorbed query
// [Heads*(rd+R)][q input], the cache vector's halves [rd+R][Dim] (latent rows after rd
// zero rows; rope rows then zero rows), the latent norm padded to rd+R (ones on the rope
// part, which it multiplies by zero), and the absorbed output [Dim][Heads*(rd+R)].
type mlaAbsorbed struct {
	q, kvLatent, kvRope, norm, o *format.Tensor
}

// absorbMLA computes the absorbed matrices of a layer (prefix p names them) from its file
// tensors, summing in float64.
func absorbMLA(c format.Config, p string, f *mlaTensors) (*mlaAbsorbed, error) {
	nope, rd, r, vd, heads := c.QKNopeDim, c.RopeDim, c.KVLoRARank, c.VHeadDim, c.Heads
	hd, cache := nope+rd, rd+r
	dense := func(t *format.Tensor) ([]float32, int, error) {
		rows, cols := t.Rows()
		out := make([]float32, rows*cols)
		if err := quant.Dequantize(t.Type, t.Data, out); err != nil {
			return nil, 0, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		return out, cols, nil
	}
	qw, qin, err := dense(f.q)
	if err != nil {
		return nil, err
	}
	kvA, _, err := dense(f.kvA)
	if err != nil {
		return nil, err
	}
	norm, _, err := dense(f.kvANorm)
	if err != nil {
		return nil, err
	}
	kvB, _, err := dense(f.kvB)
	if err != nil {
		return nil, err
	}
	ow, _, err := dense(f.o)
	if err != nil {
		return nil, err
	}
	kvRow := func(h, i int) []float32 { return kvB[(h*(nope+vd)+i)*r:][:r] } // W_UK[h] rows i < nope, then W_UV[h]

	// Each head's query rows, and each row of the output, are computed apart: they run
	// in parallel (a released model's take seconds a layer).
	q := make([]float32, heads*cache*qin)
	parallelFor(heads, func(h int) {
		acc := make([]float64, qin)
		dst := q[h*cache*qin:]
		copy(dst[:rd*qin], qw[(h*hd+nope)*qin:][:rd*qin])
		for j := range r {
			clear(acc)
			for i := range nope {
				wk := float64(kvRow(h, i)[j])
				for x, v := range qw[(h*hd+i)*qin:][:qin] {
					acc[x] += wk * float64(v)
				}
			}
			row := dst[(rd+j)*qin:][:qin]
			for x := range row {
				row[x] = float32(acc[x])
			}
		}
	})
	kvLatent := make([]float32, cache*c.Dim)
	copy(kvLatent[rd*c.Dim:], kvA[:r*c.Dim])
	kvRope := make([]float32, cache*c.Dim)
	copy(kvRope, kvA[r*c.Dim:][:rd*c.Dim])
	padNorm := make([]float32, cache)
	for i := range rd {
		padNorm[i] = 1
	}
	copy(padNorm[rd:], norm)
	o := make([]float32, c.Dim*heads*cache)
	parallelFor(c.Dim, func(d int) {
		sum := make([]float64, r)
		for h := range heads {
			clear(sum)
			for i := range vd {
				wo := float64(ow[d*heads*vd+h*vd+i])
				for j, v := range kvRow(h, nope+i) {
					sum[j] += wo * float64(v)
				}
			}
			row := o[d*heads*cache+h*cache+rd:][:r]
			for j := range row {
				row[j] = float32(sum[j])
			}
		}
	})
	t := func(name string, vals []float32, shape ...int) *format.Tensor {
		data := make([]byte, 4*len(vals))
		for i, v := range vals {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
		return &format.Tensor{Name: p + name, Type: quant.F32, Shape: shape, Data: data}
	}
	return &mlaAbsorbed{
		q:        t("mla_q_absorbed", q, heads*cache, qin),
		kvLatent: t("mla_kv_latent", kvLatent, cache, c.Dim),
		kvRope:   t("mla_kv_rope", kvRope, cache, c.Dim),
		norm:     t("mla_kv_norm", padNorm, cache),
		o:        t("mla_output_absorbed", o, c.Dim, heads*cache),
	}, nil
}

// parallelFor calls fn(i) for every i < n, on as many goroutines as there are CPUs.
func parallelFor(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}

// mlaAttention is the attention half of block l of an MLA model on the rows in, into
// a.ffnOut (summed over the tensor-parallel ranks): the absorbed query, the cache vector
// [kr | c] assembled in a.k (a.v as scratch), rotated and written with RopeKVWrite, the
// attention over the cached vectors, and the absorbed output projection.
func (s *shard) mlaAttention(l int, a *activations, in backend.Tensor, kv backend.KVCache, st backend.Step) error {
	be, lw, c := s.be, &s.w.layers[l], s.cfg
	eps := float32(c.NormEps)
	qIn := in
	if c.QLoRARank > 0 {
		if err := be.MatMul(a.qLat, in, lw.qA); err != nil {
			return err
		}
		if err := be.RMSNorm(a.qLat, a.qLat, lw.qANorm, eps); err != nil {
			return err
		}
		qIn = a.qLat
	}
	if err := be.MatMul(a.q, qIn, lw.q); err != nil {
		return err
	}
	if err := s.project([]backend.Tensor{a.k, a.v}, in, []backend.Tensor{lw.k, lw.v}); err != nil {
		return err
	}
	if err := be.SumSquares(a.kSq, a.k); err != nil {
		return err
	}
	if err := be.RMSNormSplit(a.k, a.kSq, lw.kvANorm, c.KVLoRARank, eps); err != nil {
		return err
	}
	if err := be.Add(a.k, a.k, a.v); err != nil {
		return err
	}
	if err := be.RopeKVWrite(a.q, a.k, a.k, s.rope, kv, l, st); err != nil {
		return err
	}
	if err := be.Attention(a.att, a.q, kv, l, s.scale, st); err != nil {
		return err
	}
	if len(s.mass) > 0 {
		if err := be.(backend.AttentionMasser).AttentionMass(s.layerMass(l), s.massFrom, a.q, kv, l, s.scale, st); err != nil {
			return err
		}
	}
	if err := be.MatMul(a.ffnOut, a.att, lw.o); err != nil {
		return err
	}
	return s.reduce(a.ffnOut)
}

// mlaAttention is the reference path's attention of one MLA layer for the token whose
// normalized input is xb: keys and values decompressed head by head from the latent and
// cached as multi-head attention's, then plain softmax attention and the output
// projection.
func (r *Reference) mlaAttention(l int, lw *layerWeights[*format.Tensor], xb, cos, sin []float32) []float32 {
	c := r.cfg
	eps := float32(c.NormEps)
	nope, rd, vd := c.QKNopeDim, c.RopeDim, c.VHeadDim
	hd := nope + rd
	var q []float32
	if c.QLoRARank > 0 {
		q = r.matVec(lw.q, rmsNorm(r.matVec(lw.qA, xb), r.vector(lw.qANorm), eps))
	} else {
		q = r.matVec(lw.q, xb)
	}
	kva := r.matVec(lw.kvA, xb)
	latent := rmsNorm(kva[:c.KVLoRARank], r.vector(lw.kvANorm), eps)
	kr := kva[c.KVLoRARank:]
	r.rope.apply(kr, cos, sin)
	kvb := r.matVec(lw.kvB, latent)
	for h := range c.Heads {
		r.rope.apply(q[h*hd+nope:][:rd], cos, sin)
		r.keys[l] = append(r.keys[l], kvb[h*(nope+vd):][:nope]...)
		r.keys[l] = append(r.keys[l], kr...)
		r.values[l] = append(r.values[l], kvb[h*(nope+vd)+nope:][:vd]...)
	}
	att := make([]float32, c.Heads*vd)
	scores := make([]float64, r.pos+1)
	scale := float64(attentionScale(c))
	for h := range c.Heads {
		qh := q[h*hd:][:hd]
		for t := 0; t <= r.pos; t++ {
			scores[t] = dot64(qh, r.keys[l][(t*c.Heads+h)*hd:][:hd]) * scale
		}
		softmax64(scores)
		for i := range vd {
			var sum float64
			for t := 0; t <= r.pos; t++ {
				sum += scores[t] * float64(r.values[l][(t*c.Heads+h)*vd+i])
			}
			att[h*vd+i] = float32(sum)
		}
	}
	return r.matVec(lw.o, att)
}
