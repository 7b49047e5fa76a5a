package cuda

import "fmt"

// decodeTile is the positions one grouped decode block reads per tile (DG_TP in
// attention.cu); split lengths are multiples of it.
const decodeTile = 32

// decodeBlocksPerSM is the grouped decode blocks per multiprocessor the split-K choice
// aims for: enough resident tiles to keep the KV reads in flight.
const decodeBlocksPerSM = 4

// decodeMaxSplits bounds the splits of one grouped decode launch (DG_MAX_SPLITS in
// attention.cu: the merging block keeps every split's weights in shared memory).
const decodeMaxSplits = 64

// groupedSplits chooses the split-K partition of the grouped decode kernel for seqs x
// kvHeads blocks over contexts up to maxCtx: one split while the blocks fill the device
// (many sequences, the usual case of batched decoding), else enough splits to fill it, at
// most maxSplits and down to one tile of positions each. A block reads its tiles one after
// another, so with few sequences (batch-1 decode) short splits keep each block's chain of
// dependent loads short; the combine launch that merges them costs the same for any count.
// It returns the split count and length.
func groupedSplits(seqs, kvHeads, maxCtx, sms, maxSplits int) (int, int) {
	blocks := seqs * kvHeads
	want := (decodeBlocksPerSM*max(sms, 1) + blocks - 1) / blocks
	splits := max(1, min(want, (maxCtx+decodeTile-1)/decodeTile, maxSplits))
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
// 16-byte loads. With one split a block writes out directly; with more, the last split
// block of each (kv head, sequence) merges the partial results in a.Work into out.
func (o *Ops) decodeGrouped(a DecodeArgs, group int) error {
	c, w, hd := a.Cache, a.Work, a.Cache.HeadDim
	maxSplits := min(decodeMaxSplits, max(1, w.Splits*w.Seqs*w.Heads/(a.Seqs*a.Heads)))
	var splits, splitLen int
	if a.Splits > 0 {
		splits, splitLen = fitSplits(a.MaxContext, min(a.Splits, maxSplits, a.MaxContext))
	} else {
		splits, splitLen = groupedSplits(a.Seqs, c.KVHeads, a.MaxContext, o.Dev.info.Multiprocessors, maxSplits)
	}
	if splits > 1 && w.Done.Len < a.Seqs*c.KVHeads {
		return fmt.Errorf("cuda attention decode: workspace counts %d (sequence, kv head) pairs, want %d", w.Done.Len, a.Seqs*c.KVHeads)
	}
	name := fmt.Sprintf("attn_decode_grp%dg%d_%s", hd, group, suffix(c.K.DType))
	return o.Dev.Launch(o.Kern.mod, name, Dim3{splits, c.KVHeads, a.Seqs}, Dim3{128, 1, 1}, 0,
		a.Out, a.OutStride, outKind(a.Out.DType), a.Q, a.QStride, c.K, c.V, a.BlockTables, a.MaxBlocks, a.ContextLens,
		w.M, w.L, w.O, w.Done, a.Heads, c.KVHeads, c.BlockSize, splitLen, a.Scale)
}
