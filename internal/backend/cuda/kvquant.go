package cuda

import "fmt"

// KVCodes is the code type of a quantized KV cache layer (kernels/attention_kvq.cu), the
// layout of package kvquant: a cache layer of codes holds one code byte per element in K
// and V (U8, laid out as the elements of a 16-bit cache) and one F32 scale per group of
// Group consecutive elements of a head vector in KS and VS ([slot][KVHeads][HeadDim/Group]),
// so that element i reads as the code's value times the scale i/Group.
type KVCodes int

// The code types: KVPlain (no codes: K and V hold F32, F16 or BF16 values), signed 8-bit
// integers, FP8 E4M3 (largest 448) and FP8 E5M2 (largest 57344).
const (
	KVPlain KVCodes = iota
	KVInt8
	KVE4M3
	KVE5M2
)

// String returns the code type's kernel-name suffix.
func (c KVCodes) String() string {
	switch c {
	case KVPlain:
		return "plain"
	case KVInt8:
		return "i8"
	case KVE4M3:
		return "e4m3"
	case KVE5M2:
		return "e5m2"
	}
	return fmt.Sprintf("kvcodes(%d)", int(c))
}

// Quantized reports whether the layer holds codes and scales.
func (c *KVCacheLayer) Quantized() bool { return c.Codes != KVPlain }

// checkQuantized checks the code buffers of a quantized layer of n elements.
func (c *KVCacheLayer) checkQuantized(op string, n int) error {
	if c.Codes < KVInt8 || c.Codes > KVE5M2 {
		return fmt.Errorf("cuda %s: kv cache codes %s", op, c.Codes)
	}
	if c.Group <= 0 || c.HeadDim%c.Group != 0 {
		return fmt.Errorf("cuda %s: kv cache scale groups of %d in heads of %d", op, c.Group, c.HeadDim)
	}
	g := n / c.Group
	return firstErr(need(op, "K codes", c.K, n, U8), need(op, "V codes", c.V, n, U8),
		need(op, "K scales", c.KS, g, F32), need(op, "V scales", c.VS, g, F32))
}

// refuseQuantized returns an error when c is quantized: for the kernels that read 16-bit
// and float32 caches only.
func (c *KVCacheLayer) refuseQuantized(op string) error {
	if c.Quantized() {
		return fmt.Errorf("cuda %s: a kv cache of %s codes is not supported", op, c.Codes)
	}
	return nil
}

// ropeKVQuantized launches rope_kvq: RopeKV into a quantized cache (a checked).
func (o *Ops) ropeKVQuantized(a RopeKVArgs, neox int) error {
	c := a.Cache
	return o.Dev.Launch(o.Kern.mod, "rope_kvq_"+c.Codes.String(), Dim3{a.Tokens, a.Heads + c.KVHeads, 1}, Dim3{64, 1, 1}, 0,
		a.Q, a.K, a.V, a.QStride, a.KStride, a.VStride, c.K, c.V, c.KS, c.VS, a.Slots, a.Positions, a.Rope.InvFreq,
		a.Rope.MScale, a.Heads, c.KVHeads, c.HeadDim, a.Rope.Dim, neox, c.Group)
}

// QuantizedDecode reports whether AttentionDecode serves a quantized cache with group query
// heads per kv head of head size hd (attn_decode_grpq: groups of 1, 2, 4 and 8, head sizes
// 64 and 128); other shapes run AttentionPrefill, which takes a decode step as chunks of
// one token.
func QuantizedDecode(group, hd int) bool { return groupedDecode(group, hd) }

// decodeQuantized runs attn_decode_grpq over a quantized cache (a checked): one block per
// (split, kv head, sequence), the split-K partition of the grouped decode kernel, and
// attn_combine when there is more than one split.
func (o *Ops) decodeQuantized(a DecodeArgs, group int) error {
	c, w, hd := a.Cache, a.Work, a.Cache.HeadDim
	if !QuantizedDecode(group, hd) {
		return fmt.Errorf("cuda attention decode: no quantized decode kernel for %d query heads per kv head of %d", group, hd)
	}
	maxSplits := min(decodeMaxSplits, max(1, w.Splits*w.Seqs*w.Heads/(a.Seqs*a.Heads)))
	var splits, splitLen int
	if a.Splits > 0 {
		splits, splitLen = fitSplits(a.MaxContext, min(a.Splits, maxSplits, a.MaxContext))
	} else {
		splits, splitLen = groupedSplits(a.Seqs, c.KVHeads, a.MaxContext, o.Dev.info.Multiprocessors, maxSplits)
	}
	name := fmt.Sprintf("attn_decode_grpq%dg%d_%s", hd, group, c.Codes)
	if err := o.Dev.Launch(o.Kern.mod, name, Dim3{splits, c.KVHeads, a.Seqs}, Dim3{128, 1, 1}, 0,
		a.Out, a.OutStride, outKind(a.Out.DType), a.Q, a.QStride, c.K, c.V, c.KS, c.VS, a.BlockTables, a.MaxBlocks,
		a.ContextLens, w.M, w.L, w.O, a.Heads, c.KVHeads, c.BlockSize, splitLen, a.Scale); err != nil {
		return err
	}
	if splits == 1 {
		return nil
	}
	return o.Dev.Launch(o.Kern.mod, "attn_combine_"+suffix(a.Out.DType), Dim3{a.Heads, a.Seqs, 1}, Dim3{128, 1, 1}, 0,
		a.Out, a.OutStride, w.M, w.L, w.O, splits, a.Heads, hd)
}

// prefillQuantizedTC runs the tensor-core prefill over a quantized cache (a checked; head
// sizes 64 and 128, F32 out): attn_prefill_tc with each K/V tile dequantized and rounded to
// BF16 as it is loaded, Q and the probabilities rounded to BF16 as for a BF16 cache.
func (o *Ops) prefillQuantizedTC(a PrefillArgs) error {
	c := a.Cache
	tiles := (a.MaxQueryLen + prefillTileTC - 1) / prefillTileTC
	return o.Dev.Launch(o.Kern.mod, fmt.Sprintf("attn_prefill_tc%d_%s_f32", c.HeadDim, c.Codes), Dim3{tiles, a.Heads, a.Seqs},
		Dim3{128, 1, 1}, 0, a.Out, a.OutStride, a.Q, a.QStride, c.K, c.V, c.KS, c.VS, a.BlockTables, a.MaxBlocks,
		a.SeqStarts, a.ContextLens, a.Heads, c.KVHeads, c.BlockSize, a.Scale)
}

// quantizedTensorCores reports whether AttentionPrefill over a quantized cache of head size
// hd runs on tensor cores for an output of type out.
func quantizedTensorCores(hd int, out DType) bool { return (hd == 64 || hd == 128) && out == F32 }

// prefillQuantized runs attn_prefillq over a quantized cache (a checked), with a window
// and soft-capping when they are > 0 (AttentionWindow's meaning).
func (o *Ops) prefillQuantized(a PrefillArgs, window int, softcap float32) error {
	c := a.Cache
	tiles := (a.MaxQueryLen + prefillTile - 1) / prefillTile
	return o.Dev.Launch(o.Kern.mod, "attn_prefillq_"+c.Codes.String(), Dim3{tiles, a.Heads, a.Seqs}, Dim3{128, 1, 1}, 0,
		a.Out, a.OutStride, outKind(a.Out.DType), a.Q, a.QStride, c.K, c.V, c.KS, c.VS, a.BlockTables, a.MaxBlocks,
		a.SeqStarts, a.ContextLens, a.Heads, c.KVHeads, c.HeadDim, c.Group, c.BlockSize, a.Scale, window, softcap)
}
