package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/kvquant"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// The quantized KV cache on the GPU (--kv-cache-dtype int8, fp8_e4m3, fp8_e5m2): package
// kvquant's layout, the same bytes as the CPU backend's, so that KV blocks move between
// CPU and GPU caches (transfer, the Redis pool, host offload) unchanged. Each layer holds
// a code byte per element and a float32 scale per kvquant.Group elements of a head vector
// (cuda.KVCodes); RopeKVWrite quantizes each token's keys and values as it writes them,
// and attention reads the codes and dequantizes them in registers.

// kvCodes maps a quantized KV cache type to its device code type.
func kvCodes(t quant.Type) (cuda.KVCodes, bool) {
	c, ok := map[quant.Type]cuda.KVCodes{quant.KVInt8: cuda.KVInt8, quant.KVFP8E4M3: cuda.KVE4M3, quant.KVFP8E5M2: cuda.KVE5M2}[t]
	return c, ok
}

// newQuantizedKVCache allocates a zeroed quantized cache of spec (inside Run): per layer,
// U8 codes for K and V (rounded up to whole 32-bit words, which the zeroing fills) and F32
// scales (the keys' alone when the values are the keys).
func (b *Backend) newQuantizedKVCache(spec backend.KVSpec, codes cuda.KVCodes) (backend.KVCache, error) {
	if spec.HeadDim > cuda.MaxHeadDim {
		return nil, fmt.Errorf("cuda kv cache: %s elements in heads of %d: at most %d (a wider cache, such as multi-head latent attention's, takes f32, f16 or bf16)",
			spec.DType, spec.HeadDim, cuda.MaxHeadDim)
	}
	c := &kvCache{spec: spec}
	n := spec.NumBlocks * spec.BlockSize * spec.KVHeads * spec.HeadDim
	group := kvquant.Group(spec.HeadDim)
	for l := range spec.Layers {
		layer := &cuda.KVCacheLayer{NumBlocks: spec.NumBlocks, BlockSize: spec.BlockSize, KVHeads: spec.KVHeads,
			HeadDim: spec.HeadDim, Codes: codes, Group: group, ValuesAreKeys: spec.ValuesAreKeys}
		parts := []struct {
			buf *cuda.Buffer
			dt  cuda.DType
			n   int
		}{{&layer.K, cuda.U8, (n + 3) / 4 * 4}, {&layer.KS, cuda.F32, n / group}, {&layer.V, cuda.U8, (n + 3) / 4 * 4}, {&layer.VS, cuda.F32, n / group}}
		if spec.ValuesAreKeys {
			parts = parts[:2]
		}
		for _, p := range parts {
			buf, err := b.alloc(p.dt, p.n)
			if err != nil {
				return nil, fmt.Errorf("cuda kv cache: layer %d: %w", l, err)
			}
			if err := b.dev.Fill32(buf, 0); err != nil {
				return nil, err
			}
			*p.buf = buf
		}
		if spec.ValuesAreKeys { // the values are the keys: codes and scales held once
			layer.V, layer.VS = layer.K, layer.KS
		}
		if err := layer.Check("kv cache"); err != nil {
			return nil, err
		}
		c.layers = append(c.layers, layer)
	}
	return c, nil
}

// attentionQuantized runs attention over a quantized cache layer: the grouped decode
// kernel when every sequence has one query token, no window or soft-cap applies and the
// shape has an instance (cuda.QuantizedDecode); the prefill kernel (on tensor cores for
// head sizes 64 and 128) when a sequence has more than verifyMaxQuery tokens and no window
// or soft-cap applies, as for a BF16 cache; the scalar varlen kernel otherwise (short
// chunks and verification, windows, soft-capping, any head size), whose arithmetic is
// float32 throughout.
func (b *Backend) attentionQuantized(o, qs *tensor, l *cuda.KVCacheLayer, s *step, opt backend.AttentionOptions) error {
	m, qDim := s.meta, qs.cols()
	heads, seqs, tokens := qDim/l.HeadDim, m.NumSeqs(), m.NumTokens()
	if heads%l.KVHeads != 0 {
		return fmt.Errorf("cuda attention: %d query heads over %d kv heads", heads, l.KVHeads)
	}
	maxCtx := m.MaxContextLen
	for _, c := range m.ContextLens {
		maxCtx = max(maxCtx, int(c))
	}
	if s.graphable {
		maxCtx = s.maxBlocks * l.BlockSize // the bound of every step that replays the graph
	}
	window := opt.Window
	if window >= maxCtx {
		window = 0 // no context reaches it
	}
	if tokens == seqs && window <= 0 && opt.Softcap <= 0 && cuda.QuantizedDecode(heads/l.KVHeads, l.HeadDim) {
		if err := b.ensureWork(seqs, heads, l.HeadDim); err != nil {
			return err
		}
		return b.ops.AttentionDecode(cuda.DecodeArgs{Out: o.buf, OutStride: qDim, Q: qs.buf, QStride: qDim, Seqs: seqs, Heads: heads,
			Cache: l, BlockTables: s.blockTables, MaxBlocks: s.maxBlocks, ContextLens: s.contextLens,
			MaxContext: maxCtx, Scale: opt.Scale, Work: b.work})
	}
	maxQ := m.MaxQueryLen
	for i := range seqs {
		maxQ = max(maxQ, int(m.QueryStarts[i+1]-m.QueryStarts[i]))
	}
	a := cuda.PrefillArgs{Out: o.buf, OutStride: qDim, Q: qs.buf, QStride: qDim, Tokens: tokens,
		Seqs: seqs, Heads: heads, Cache: l, SeqStarts: s.queryStarts, ContextLens: s.contextLens, MaxQueryLen: maxQ,
		BlockTables: s.blockTables, MaxBlocks: s.maxBlocks, Scale: opt.Scale}
	if maxQ > verifyMaxQuery && window <= 0 && opt.Softcap <= 0 {
		return b.ops.AttentionPrefill(a)
	}
	return b.ops.AttentionWindow(a, window, opt.Softcap)
}
