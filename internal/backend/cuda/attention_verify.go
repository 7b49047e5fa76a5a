package cuda

import (
	"fmt"
	"slices"
)

// maxVerifyRows is the most (query, head) rows one attn_verify block serves: NR in
// attention.cu, at most 32 for 16-bit caches and 16 for float32 ones (shared memory).
func maxVerifyRows(cache DType) int {
	if cache == F32 {
		return 16
	}
	return 32
}

// VerifyKernel reports whether AttentionVerify serves a cache of type cache with heads
// query heads over kvHeads kv heads of size headDim: head sizes 64 and 128, and kv heads
// whose query heads fit one block's rows.
func VerifyKernel(cache DType, heads, kvHeads, headDim int) bool {
	return (headDim == 64 || headDim == 128) && kvHeads > 0 && heads%kvHeads == 0 && heads/kvHeads <= maxVerifyRows(cache)
}

// verifyChunks returns how many blocks share one kv head's queries of a sequence of up to
// maxQuery tokens (the grid's chunks) and the queries each takes, for blocks of rows
// (query, head) rows and group query heads per kv head.
func verifyChunks(rows, group, maxQuery int) (chunks, perBlock int) {
	perBlock = max(1, rows/group)
	return (maxQuery + perBlock - 1) / perBlock, perBlock
}

// verifyRowChoices are the rows a block of attn_verify may serve (its instances in
// attention.cu): few, for latency at small batches, or many, for reuse of K and V tiles.
var verifyRowChoices = []int{4, 16, 32}

// verifyBlockRows chooses the rows of one attn_verify block among verifyRowChoices (at
// least the group, at most maxVerifyRows): the fewest, so that a block's serial work is as
// close to a lone decode query's as the group allows, while the grid (splits x kv heads x
// chunks x sequences) fits the blocks the device runs at once (8 a multiprocessor); past
// that, more rows a block, so that a tile of K and V loaded once serves more queries. The
// choice does not change any output bit: every row's arithmetic is the same in any block.
func verifyBlockRows(cache DType, group, maxQuery, seqs, kvHeads, splits, multiprocessors int) int {
	rows := 0
	for _, r := range verifyRowChoices {
		if r < group || r > maxVerifyRows(cache) {
			continue
		}
		rows = r
		if chunks, _ := verifyChunks(r, group, maxQuery); splits*kvHeads*chunks*seqs <= 8*multiprocessors {
			break
		}
	}
	return rows
}

// VerifyArgs are the operands of AttentionVerify: a few query tokens per sequence, each
// sequence's last of its context, concatenated (as PrefillArgs lays them out).
type VerifyArgs struct {
	Out       Buffer // [Tokens] rows at OutStride (F32, F16 or BF16)
	OutStride int
	Q         Buffer // F32 [Tokens] rows at QStride
	QStride   int
	Tokens    int
	Seqs      int
	Heads     int
	Cache     *KVCacheLayer
	// SeqStarts (I32 [Seqs+1]) gives each sequence's first token, ContextLens (I32 [Seqs])
	// its context after the step: the i-th of its q tokens attends to the context's entries
	// 0..ContextLens-q+i.
	SeqStarts, ContextLens Buffer
	// MaxQueryLen bounds every sequence's token count; it sizes the grid.
	MaxQueryLen int
	BlockTables Buffer // I32 [Seqs][MaxBlocks]
	MaxBlocks   int
	// MaxContext bounds every ContextLens entry; with Seqs it sizes the split-K partition,
	// as DecodeArgs.MaxContext does.
	MaxContext int
	Scale      float32
	// Work holds the partial results: at least Tokens (and Seqs x MaxQueryLen) sequences'
	// worth of its Seqs.
	Work *DecodeWorkspace
	// Splits forces the number of splits when > 0; otherwise AttentionDecode's choice for
	// Seqs sequences of MaxContext.
	Splits int
	// Rows forces the (query, head) rows of a block when > 0: one of verifyRowChoices, at
	// least the query heads of a kv head, at most 16 for a float32 cache; otherwise
	// verifyBlockRows's choice. No choice changes the output.
	Rows int
}

// AttentionVerify runs split-K decode attention for sequences of a few query tokens each
// (speculative verification), each query masked causally at its own context index
// (attn_verify). It splits the context as AttentionDecode would for the same sequences and
// context bound, and computes each query as the grouped decode kernel computes a lone one,
// so that a query's output equals AttentionDecode's for it, bit for bit, under the same
// split choice (the same sequence count, context bound and workspace).
func (o *Ops) AttentionVerify(a VerifyArgs) error {
	c := a.Cache
	if err := firstErr(c.checkTiled("attention verify"), c.refuseQuantized("attention verify")); err != nil {
		return err
	}
	hd := c.HeadDim
	if a.Tokens <= 0 || a.Seqs <= 0 || a.Heads <= 0 || a.MaxQueryLen <= 0 || a.MaxContext <= 0 || a.MaxBlocks <= 0 {
		return fmt.Errorf("cuda attention verify: bad shape tokens=%d seqs=%d heads=%d maxQuery=%d maxContext=%d maxBlocks=%d",
			a.Tokens, a.Seqs, a.Heads, a.MaxQueryLen, a.MaxContext, a.MaxBlocks)
	}
	if !VerifyKernel(c.K.DType, a.Heads, c.KVHeads, hd) {
		return fmt.Errorf("cuda attention verify: %d heads over %d kv heads of %d: unsupported", a.Heads, c.KVHeads, hd)
	}
	if a.MaxContext > a.MaxBlocks*c.BlockSize {
		return fmt.Errorf("cuda attention verify: context %d exceeds %d blocks of %d", a.MaxContext, a.MaxBlocks, c.BlockSize)
	}
	if a.QStride < a.Heads*hd || a.OutStride < a.Heads*hd {
		return fmt.Errorf("cuda attention verify: strides q=%d out=%d below %d", a.QStride, a.OutStride, a.Heads*hd)
	}
	group := a.Heads / c.KVHeads
	w := a.Work
	if w == nil || w.Seqs < max(a.Tokens, a.Seqs*a.MaxQueryLen) || w.Heads < a.Heads || w.HeadDim < hd {
		return fmt.Errorf("cuda attention verify: workspace too small for %d tokens (%d seqs of up to %d) x %d heads x %d dims",
			a.Tokens, a.Seqs, a.MaxQueryLen, a.Heads, hd)
	}
	splits, splitLen := o.verifySplits(a)
	rows := verifyBlockRows(c.K.DType, group, a.MaxQueryLen, a.Seqs, c.KVHeads, splits, o.Dev.info.Multiprocessors)
	if a.Rows > 0 {
		if a.Rows < group || a.Rows > maxVerifyRows(c.K.DType) || !slices.Contains(verifyRowChoices, a.Rows) {
			return fmt.Errorf("cuda attention verify: %d rows a block for %d query heads a kv head and a %s cache", a.Rows, group, c.K.DType)
		}
		rows = a.Rows
	}
	chunks, _ := verifyChunks(rows, group, a.MaxQueryLen)
	last := a.Tokens - 1
	if err := firstErr(need("attention verify", "out", a.Out, last*a.OutStride+a.Heads*hd, F32, F16, BF16),
		need("attention verify", "q", a.Q, last*a.QStride+a.Heads*hd, F32),
		need("attention verify", "seq starts", a.SeqStarts, a.Seqs+1, I32),
		need("attention verify", "context lengths", a.ContextLens, a.Seqs, I32),
		need("attention verify", "block tables", a.BlockTables, a.Seqs*a.MaxBlocks, I32),
		need("attention verify", "workspace counts", w.Done, a.Seqs*c.KVHeads*chunks, I32)); err != nil {
		return err
	}
	name := fmt.Sprintf("attn_verify%dr%d_%s", hd, rows, suffix(c.K.DType))
	return o.Dev.Launch(o.Kern.mod, name, Dim3{splits, c.KVHeads * chunks, a.Seqs}, Dim3{128, 1, 1}, 0,
		a.Out, a.OutStride, outKind(a.Out.DType), a.Q, a.QStride, c.K, c.V, a.BlockTables, a.MaxBlocks, a.SeqStarts,
		a.ContextLens, w.M, w.L, w.O, w.Done, a.Heads, c.KVHeads, c.BlockSize, splitLen, a.Scale, chunks)
}

// verifySplits returns the split-K partition of an AttentionVerify launch: decodeGrouped's
// for a.Seqs sequences of a.MaxContext, with as many splits at most as the workspace holds
// for a.Tokens queries.
func (o *Ops) verifySplits(a VerifyArgs) (splits, splitLen int) {
	w := a.Work
	capacity := w.Splits * w.Seqs * w.Heads
	maxSplits := min(decodeMaxSplits, max(1, capacity/(a.Seqs*a.Heads)), max(1, capacity/(a.Tokens*a.Heads)))
	if a.Splits > 0 {
		return fitSplits(a.MaxContext, min(a.Splits, maxSplits, a.MaxContext))
	}
	return groupedSplits(a.Seqs, a.Cache.KVHeads, a.MaxContext, o.Dev.info.Multiprocessors, maxSplits)
}
