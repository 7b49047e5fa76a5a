package cuda

import "fmt"

// decodeTile is the positions one grouped decode block reads per tile (DG_TP in
// attention.cu); split lengths are multiples of it.
const decodeTile = 32

// decodeBlocksPerSM is the grouped decode blocks per multiprocessor the split-K choice
// aims for: enough resident tiles to keep the KV reads in flight.
const decodeBlocksPerSM = 4

// decodeMinSplitLen is the fewest positions a split of the grouped decode covers, so that
// a split's fixed cost (Q load, output write, combine) stays small against its reads.
const decodeMinSplitLen = 128

// groupedSplits chooses the split-K partition of the grouped decode kernel for seqs x
// kvHeads blocks over contexts up to maxCtx: one split while the blocks fill the device
// (many sequences, the usual case of batched decoding), else enough splits of at least
// decodeMinSplitLen positions, at most maxSplits. It returns the split count and length.
func groupedSplits(seqs, kvHeads, maxCtx, sms, maxSplits int) (int, int) {
	blocks := seqs * kvHeads
	want := (decodeBlocksPerSM*max(sms, 1) + blocks - 1) / blocks
	splits := max(1, min(want, (maxCtx+decodeMinSplitLen-1)/decodeMinSplitLen, maxSplits))
	return fitSplits(maxCtx, splits)
}

// fitSplits rounds the split length up to a multiple of decodeTile and recounts the
// splits, so that no split is empty by construction.
func fitSplits(maxCtx, splits int) (int, int) {
	splitLen := (maxCtx + splits - 1) / splits
	splitLen = (splitLen + decodeTile - 1) / decodeTile * decodeTile
	return (maxCtx + splitLen - 1) / splitLen, splitLen
}

// groupedDecode reports whether attn_decode_grp serves group query heads per kv head of
// head size hd (it is compiled for groups of 1, 2, 4 and 8 and head sizes 64 and 128).
func groupedDecode(group, hd int) bool {
	return (group == 1 || group == 2 || group == 4 || group == 8) && (hd == 64 || hd == 128)
}

// outKind is the output type code of attn_decode_grp (0 F32, 1 F16, 2 BF16).
func outKind(dt DType) int {
	switch dt {
	case F16:
		return 1
	case BF16:
		return 2
	}
	return 0
}

// decodeGrouped runs attn_decode_grp: one block per (split, kv head, sequence) for all
// group query heads of the kv head, K/V tiles read once through the block table with
// 16-byte loads. With one split it writes out directly; with more, attn_combine merges
// the partial results in a.Work.
func (o *Ops) decodeGrouped(a DecodeArgs, group int) error {
	c, w, hd := a.Cache, a.Work, a.Cache.HeadDim
	maxSplits := max(1, w.Splits*w.Seqs*w.Heads/(a.Seqs*a.Heads))
	var splits, splitLen int
	if a.Splits > 0 {
		splits, splitLen = fitSplits(a.MaxContext, min(a.Splits, maxSplits, a.MaxContext))
	} else {
		splits, splitLen = groupedSplits(a.Seqs, c.KVHeads, a.MaxContext, o.Dev.info.Multiprocessors, maxSplits)
	}
	name := fmt.Sprintf("attn_decode_grp%dg%d_%s", hd, group, suffix(c.K.DType))
	if err := o.Dev.Launch(o.Kern.mod, name, Dim3{splits, c.KVHeads, a.Seqs}, Dim3{128, 1, 1}, 0,
		a.Out, a.OutStride, outKind(a.Out.DType), a.Q, a.QStride, c.K, c.V, a.BlockTables, a.MaxBlocks, a.ContextLens,
		w.M, w.L, w.O, a.Heads, c.KVHeads, c.BlockSize, splitLen, a.Scale); err != nil {
		return err
	}
	if splits == 1 {
		return nil
	}
	return o.Dev.Launch(o.Kern.mod, "attn_combine_"+suffix(a.Out.DType), Dim3{a.Heads, a.Seqs, 1}, Dim3{128, 1, 1}, 0,
		a.Out, a.OutStride, w.M, w.L, w.O, splits, a.Heads, hd)
}
