package cuda

import "fmt"

// mlaRows is the (query token, head) rows one attn_mla block serves (MLA_ROWS in
// attention_mla.cu).
const mlaRows = 16

// MLAArgs are the operands of AttentionMLA: variable-length query chunks of Seqs
// sequences, concatenated (as PrefillArgs lays them out), over a cache whose values are
// its keys.
type MLAArgs struct {
	Out       Buffer // [Tokens] rows at OutStride (F32, F16 or BF16)
	OutStride int
	Q         Buffer // F32 [Tokens] rows at QStride
	QStride   int
	Tokens    int
	Seqs      int
	Heads     int
	Cache     *KVCacheLayer
	// SeqStarts (I32 [Seqs+1]) gives each sequence's first token, ContextLens (I32 [Seqs])
	// its context after the step: the i-th of its q tokens attends to the context's
	// entries 0..ContextLens-q+i, which must be written already.
	SeqStarts, ContextLens Buffer
	// MaxQueryLen bounds every sequence's token count and MaxContext every ContextLens
	// entry; they size the grid and the split-K partition.
	MaxQueryLen, MaxContext int
	BlockTables             Buffer // I32 [Seqs][MaxBlocks]
	MaxBlocks               int
	Scale                   float32
	// Work holds the partial results when the context is split: at least Tokens
	// sequences' worth of its Seqs. It may be nil when the step needs no split (Splits).
	Work *DecodeWorkspace
	// Splits forces the number of splits when > 0; otherwise enough blocks to fill the
	// device (MLASplits).
	Splits int
}

// mlaHeadGroup returns the query heads of one kv head an attn_mla block takes together:
// the largest power of two up to mlaRows that divides group.
func mlaHeadGroup(group int) int {
	hg := mlaRows
	for group%hg != 0 {
		hg /= 2
	}
	return hg
}

// mlaGrid returns attn_mla's head group, query chunks per sequence and blocks per split
// for a launch of a.
func mlaGrid(a MLAArgs) (hg, chunks, blocks int) {
	hg = mlaHeadGroup(a.Heads / a.Cache.KVHeads)
	tq := mlaRows / hg
	chunks = (a.MaxQueryLen + tq - 1) / tq
	return hg, chunks, a.Heads / hg * chunks * a.Seqs
}

// MLASplits returns the split-K partition AttentionMLA chooses for a on a device of sms
// multiprocessors, with the workspace holding room for maxSplits splits of each of a's
// (token, head) rows: one split when the blocks fill the device (prefill, large batches),
// else as decodeGrouped splits (tiles of decodeTile positions at least).
func MLASplits(a MLAArgs, sms, maxSplits int) (splits, splitLen int) {
	if a.Splits > 0 {
		return fitSplits(a.MaxContext, max(1, min(a.Splits, maxSplits, a.MaxContext)))
	}
	_, _, blocks := mlaGrid(a)
	return groupedSplits(blocks, 1, a.MaxContext, sms, max(1, maxSplits))
}

// AttentionMLA runs causal attention of variable-length query chunks (prefill, decode and
// speculative verification alike) over a float cache whose values are its keys, of head
// dims that are multiples of 32 up to MaxMLAHeadDim: multi-head latent attention, whose
// query heads all read the one cached vector a token. Each attn_mla block serves 16
// (token, head) rows of one kv head — up to 16 of its query heads for one token, or fewer
// heads for more tokens — so that every tile of keys it reads serves them all; the
// values are read from the same tile. A context is split over blocks while the grid
// would not fill the device, the splits merged by attn_combine.
func (o *Ops) AttentionMLA(a MLAArgs) error {
	c := a.Cache
	if err := firstErr(c.Check("attention mla"), c.refuseQuantized("attention mla")); err != nil {
		return err
	}
	hd := c.HeadDim
	if !c.ValuesAreKeys || hd%32 != 0 {
		return fmt.Errorf("cuda attention mla: a cache of head dim %d (values are keys: %v); want one whose values are its keys, of a multiple of 32", hd, c.ValuesAreKeys)
	}
	if a.Tokens <= 0 || a.Seqs <= 0 || a.Heads <= 0 || a.Heads%c.KVHeads != 0 || a.MaxQueryLen <= 0 || a.MaxContext <= 0 || a.MaxBlocks <= 0 {
		return fmt.Errorf("cuda attention mla: bad shape tokens=%d seqs=%d heads=%d kvHeads=%d maxQuery=%d maxContext=%d maxBlocks=%d",
			a.Tokens, a.Seqs, a.Heads, c.KVHeads, a.MaxQueryLen, a.MaxContext, a.MaxBlocks)
	}
	if a.MaxContext > a.MaxBlocks*c.BlockSize {
		return fmt.Errorf("cuda attention mla: context %d exceeds %d blocks of %d", a.MaxContext, a.MaxBlocks, c.BlockSize)
	}
	if a.QStride < a.Heads*hd || a.OutStride < a.Heads*hd {
		return fmt.Errorf("cuda attention mla: strides q=%d out=%d below %d", a.QStride, a.OutStride, a.Heads*hd)
	}
	last := a.Tokens - 1
	if err := firstErr(need("attention mla", "out", a.Out, last*a.OutStride+a.Heads*hd, F32, F16, BF16),
		need("attention mla", "q", a.Q, last*a.QStride+a.Heads*hd, F32),
		need("attention mla", "seq starts", a.SeqStarts, a.Seqs+1, I32),
		need("attention mla", "context lengths", a.ContextLens, a.Seqs, I32),
		need("attention mla", "block tables", a.BlockTables, a.Seqs*a.MaxBlocks, I32)); err != nil {
		return err
	}
	maxSplits := 0
	if w := a.Work; w != nil && w.Seqs >= a.Tokens && w.Heads >= a.Heads && w.HeadDim >= hd {
		maxSplits = min(decodeMaxSplits, w.Splits*w.Seqs*w.Heads/(a.Tokens*a.Heads))
	}
	splits, splitLen := MLASplits(a, o.Dev.info.Multiprocessors, maxSplits)
	if splits > 1 && maxSplits < splits {
		return fmt.Errorf("cuda attention mla: %d splits for %d tokens x %d heads x %d dims: no workspace for them", splits, a.Tokens, a.Heads, hd)
	}
	var pm, pl, po Buffer
	if splits > 1 {
		pm, pl, po = a.Work.M, a.Work.L, a.Work.O
	}
	hg, chunks, _ := mlaGrid(a)
	err := o.Dev.Launch(o.Kern.mod, "attn_mla_"+suffix(c.K.DType), Dim3{a.Heads / hg * chunks, splits, a.Seqs}, Dim3{256, 1, 1}, 0,
		a.Out, a.OutStride, outKind(a.Out.DType), a.Q, a.QStride, c.K, a.BlockTables, a.MaxBlocks, a.SeqStarts, a.ContextLens,
		pm, pl, po, a.Heads, c.KVHeads, hd, c.BlockSize, splitLen, a.Scale, hg, chunks)
	if err != nil || splits == 1 {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "attn_combine_"+suffix(a.Out.DType), Dim3{a.Heads, a.Tokens, 1}, Dim3{128, 1, 1}, 0,
		a.Out, a.OutStride, pm, pl, po, splits, a.Heads, hd)
}
