package cuda

import (
	"fmt"
)

// KVCacheLayer is one layer's paged KV cache on the device: K and V each hold NumBlocks
// blocks of [BlockSize][KVHeads][HeadDim] values (F32, F16 or BF16, the same for both), so
// slot s = block*BlockSize + offset starts at element s*KVHeads*HeadDim. A quantized layer
// (Codes other than KVPlain) holds U8 codes in K and V, laid out as those values, and F32
// scales in KS and VS, one per Group elements (see KVCodes).
//
// With ValuesAreKeys the values are the keys: V is K (and VS is KS), one allocation, and
// RopeKV writes the keys alone (multi-head latent attention's cache).
type KVCacheLayer struct {
	K, V                                   Buffer
	NumBlocks, BlockSize, KVHeads, HeadDim int
	Codes                                  KVCodes
	KS, VS                                 Buffer
	Group                                  int
	ValuesAreKeys                          bool
}

// MaxHeadDim is the largest head dimension the attention kernels of attention.cu (and the
// quantized cache's) support.
const MaxHeadDim = 256

// MaxMLAHeadDim is the largest head dimension of a float cache whose values are its keys:
// attn_mla's (AttentionMLA), DeepSeek-V2/V3's 64 rotated + 512 latent values.
const MaxMLAHeadDim = 576

// Check checks that c is a usable cache layer: a positive shape, a head dimension of at most
// MaxHeadDim (MaxMLAHeadDim for a float cache whose values are its keys), K and V of one
// float dtype, each holding the layer's elements, one buffer when the values are the keys.
// op names the operation in errors.
func (c *KVCacheLayer) Check(op string) error {
	if c == nil || c.NumBlocks <= 0 || c.BlockSize <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 {
		return fmt.Errorf("cuda %s: bad kv cache layer %+v", op, c)
	}
	if limit := c.maxHeadDim(); c.HeadDim > limit {
		return fmt.Errorf("cuda %s: head dim %d above %d", op, c.HeadDim, limit)
	}
	if c.ValuesAreKeys && (c.V != c.K || c.VS != c.KS) {
		return fmt.Errorf("cuda %s: a cache whose values are its keys with a V buffer of its own", op)
	}
	if c.K.DType != c.V.DType {
		return fmt.Errorf("cuda %s: K cache is %s, V cache %s", op, c.K.DType, c.V.DType)
	}
	n := c.NumBlocks * c.BlockSize * c.KVHeads * c.HeadDim
	if c.Quantized() {
		return c.checkQuantized(op, n)
	}
	return firstErr(need(op, "K cache", c.K, n, F32, F16, BF16), need(op, "V cache", c.V, n, F32, F16, BF16))
}

// maxHeadDim returns the largest head dimension some attention kernel takes for c.
func (c *KVCacheLayer) maxHeadDim() int {
	if c.ValuesAreKeys && !c.Quantized() {
		return MaxMLAHeadDim
	}
	return MaxHeadDim
}

// checkTiled checks c for the tiled attention kernels of attention.cu, which take head dims
// that are multiples of 32 up to MaxHeadDim (any head dim for a quantized cache, whose
// varlen kernel takes them all).
func (c *KVCacheLayer) checkTiled(op string) error {
	if err := c.Check(op); err != nil {
		return err
	}
	if c.HeadDim > MaxHeadDim {
		return fmt.Errorf("cuda %s: head dim %d above %d (wider heads whose values are the keys run AttentionMLA)", op, c.HeadDim, MaxHeadDim)
	}
	if c.HeadDim%32 != 0 && !c.Quantized() {
		return fmt.Errorf("cuda %s: head dim %d is not a multiple of 32", op, c.HeadDim)
	}
	return nil
}

// Rope describes the rotary embedding of a model.
type Rope struct {
	InvFreq Buffer  // F32, one inverse frequency per rotated pair (Dim/2), scaling applied
	Dim     int     // rotated dimensions per head (even, at most HeadDim)
	NeoX    bool    // pairs (i, i+Dim/2) instead of (2i, 2i+1)
	MScale  float32 // multiplies cos and sin (YaRN); 1 for none
}

// RopeKVArgs are the operands of RopeKV. Q, K and V are float32 projection outputs of
// Tokens tokens; row t of each starts at t*stride (views into one fused QKV buffer work).
type RopeKVArgs struct {
	Q, K, V                   Buffer
	QStride, KStride, VStride int
	Tokens, Heads             int
	Positions, Slots          Buffer // I32, one per token; a negative slot skips the write
	Rope                      Rope
	Cache                     *KVCacheLayer
}

// RopeKV rotates the queries in place and writes the rotated keys and the values of each
// token into its cache slot: RoPE fused with the KV write through the slot mapping.
func (o *Ops) RopeKV(a RopeKVArgs) error {
	c := a.Cache
	if err := c.Check("rope kv"); err != nil {
		return err
	}
	hd := c.HeadDim
	if a.Tokens <= 0 || a.Heads <= 0 || a.Rope.Dim <= 0 || a.Rope.Dim%2 != 0 || a.Rope.Dim > hd {
		return fmt.Errorf("cuda rope kv: bad shape tokens=%d heads=%d ropeDim=%d headDim=%d", a.Tokens, a.Heads, a.Rope.Dim, hd)
	}
	if a.QStride < a.Heads*hd || a.KStride < c.KVHeads*hd || a.VStride < c.KVHeads*hd {
		return fmt.Errorf("cuda rope kv: strides q=%d k=%d v=%d too small", a.QStride, a.KStride, a.VStride)
	}
	last := a.Tokens - 1
	if err := firstErr(need("rope kv", "q", a.Q, last*a.QStride+a.Heads*hd, F32),
		need("rope kv", "k", a.K, last*a.KStride+c.KVHeads*hd, F32),
		need("rope kv", "v", a.V, last*a.VStride+c.KVHeads*hd, F32),
		need("rope kv", "positions", a.Positions, a.Tokens, I32), need("rope kv", "slots", a.Slots, a.Tokens, I32),
		need("rope kv", "inverse frequencies", a.Rope.InvFreq, a.Rope.Dim/2, F32)); err != nil {
		return err
	}
	if c.ValuesAreKeys && (a.V != a.K || a.VStride != a.KStride) {
		return fmt.Errorf("cuda rope kv: the cache's values are its keys: v must be k")
	}
	neox := 0
	if a.Rope.NeoX {
		neox = 1
	}
	if c.Quantized() {
		return o.ropeKVQuantized(a, neox)
	}
	return o.Dev.Launch(o.Kern.mod, "rope_kv_"+suffix(c.K.DType), Dim3{a.Tokens, a.Heads + c.KVHeads, 1}, Dim3{64, 1, 1}, 0,
		a.Q, a.K, a.V, a.QStride, a.KStride, a.VStride, c.K, c.V, a.Slots, a.Positions, a.Rope.InvFreq,
		a.Rope.MScale, a.Heads, c.KVHeads, hd, a.Rope.Dim, neox)
}

// gqaMaxGroup is the most query heads per kv head the grouped decode kernel takes
// (GQA_MAXG in attention.cu).
const gqaMaxGroup = 8

// DecodeWorkspace holds the split-K partial results of decode attention, sized for up to
// Seqs sequences x Heads heads x Splits splits.
type DecodeWorkspace struct {
	M, L, O Buffer // F32: max, sum [seqs][heads][splits]; output [...][headDim]
	// Done counts the finished split blocks of each (sequence, kv head) of the grouped
	// kernel (I32 [seqs][heads], zero between launches: the last block resets its count).
	Done                Buffer
	Seqs, Heads, Splits int
	HeadDim             int
}

// NewDecodeWorkspace allocates a workspace (inside Do).
func (dv *Device) NewDecodeWorkspace(seqs, heads, splits, headDim int) (*DecodeWorkspace, error) {
	if seqs <= 0 || heads <= 0 || splits <= 0 || headDim <= 0 {
		return nil, fmt.Errorf("cuda decode workspace: bad shape seqs=%d heads=%d splits=%d headDim=%d", seqs, heads, splits, headDim)
	}
	w := &DecodeWorkspace{Seqs: seqs, Heads: heads, Splits: splits, HeadDim: headDim}
	n := seqs * heads * splits
	var err error
	if w.M, err = dv.Alloc(F32, n); err != nil {
		return nil, err
	}
	if w.L, err = dv.Alloc(F32, n); err != nil {
		dv.Free(w.M)
		return nil, err
	}
	if w.O, err = dv.Alloc(F32, n*headDim); err != nil {
		dv.Free(w.M)
		dv.Free(w.L)
		return nil, err
	}
	if w.Done, err = dv.Alloc(I32, seqs*heads); err == nil {
		err = dv.Fill32(w.Done, 0)
	}
	if err != nil {
		dv.FreeDecodeWorkspace(w)
		return nil, err
	}
	return w, nil
}

// FreeDecodeWorkspace releases w (inside Do).
func (dv *Device) FreeDecodeWorkspace(w *DecodeWorkspace) error {
	errs := []error{dv.Free(w.M), dv.Free(w.L), dv.Free(w.O)}
	if w.Done.Ptr != 0 {
		errs = append(errs, dv.Free(w.Done))
	}
	return firstErr(errs...)
}

// DecodeArgs are the operands of AttentionDecode: one query token per sequence.
type DecodeArgs struct {
	Out       Buffer // [Seqs] rows at OutStride, head h at h*HeadDim (F32, F16 or BF16)
	OutStride int
	Q         Buffer // F32 [Seqs] rows at QStride
	QStride   int
	Seqs      int
	Heads     int
	Cache     *KVCacheLayer
	// BlockTables is I32 [Seqs][MaxBlocks]; ContextLens (I32 [Seqs]) gives how many cached
	// positions each sequence attends to (its query's context index + 1).
	BlockTables Buffer
	MaxBlocks   int
	ContextLens Buffer
	// MaxContext bounds every ContextLens entry; it sizes the split-K partition.
	MaxContext int
	Scale      float32
	Work       *DecodeWorkspace
	// Splits forces the number of splits when > 0; otherwise enough to fill the device.
	Splits int
	// legacy forces the older per-position kernels where the grouped tile kernel would run
	// (tests and benchmarks compare the two).
	legacy bool
}

// AttentionDecode runs split-K flash-decoding: each (split, head, sequence) block reduces a
// range of the context with an online softmax, and a combine kernel merges the splits. A
// quantized cache runs attn_decode_grpq, for the shapes QuantizedDecode names.
func (o *Ops) AttentionDecode(a DecodeArgs) error {
	c := a.Cache
	if err := c.checkTiled("attention decode"); err != nil {
		return err
	}
	hd := c.HeadDim
	if a.Seqs <= 0 || a.Heads <= 0 || a.Heads%c.KVHeads != 0 || a.MaxContext <= 0 || a.MaxBlocks <= 0 {
		return fmt.Errorf("cuda attention decode: bad shape seqs=%d heads=%d kvHeads=%d maxContext=%d maxBlocks=%d",
			a.Seqs, a.Heads, c.KVHeads, a.MaxContext, a.MaxBlocks)
	}
	if a.MaxContext > a.MaxBlocks*c.BlockSize {
		return fmt.Errorf("cuda attention decode: context %d exceeds %d blocks of %d", a.MaxContext, a.MaxBlocks, c.BlockSize)
	}
	if a.QStride < a.Heads*hd || a.OutStride < a.Heads*hd {
		return fmt.Errorf("cuda attention decode: strides q=%d out=%d below %d", a.QStride, a.OutStride, a.Heads*hd)
	}
	w := a.Work
	if w == nil || w.Seqs < a.Seqs || w.Heads < a.Heads || w.HeadDim < hd {
		return fmt.Errorf("cuda attention decode: workspace too small for %d seqs x %d heads x %d dims", a.Seqs, a.Heads, hd)
	}
	last := a.Seqs - 1
	if err := firstErr(need("attention decode", "out", a.Out, last*a.OutStride+a.Heads*hd, F32, F16, BF16),
		need("attention decode", "q", a.Q, last*a.QStride+a.Heads*hd, F32),
		need("attention decode", "block tables", a.BlockTables, a.Seqs*a.MaxBlocks, I32),
		need("attention decode", "context lengths", a.ContextLens, a.Seqs, I32)); err != nil {
		return err
	}
	group := a.Heads / c.KVHeads
	if c.Quantized() {
		return o.decodeQuantized(a, group)
	}
	if groupedDecode(group, hd) && !a.legacy {
		return o.decodeGrouped(a, group)
	}
	// The older grouped kernel takes a kv head's query heads together (keys and values
	// read once per group) for head sizes of 64 and 128.
	gqa := group <= gqaMaxGroup && (hd == 64 || hd == 128)
	blockHeads := a.Heads
	if gqa {
		blockHeads = c.KVHeads
	}
	splits := a.Splits
	if splits <= 0 {
		// Aim for two blocks per multiprocessor, with at least 64 positions per split.
		want := (2*max(o.Dev.info.Multiprocessors, 1) + a.Seqs*blockHeads - 1) / (a.Seqs * blockHeads)
		splits = max(1, min(want, (a.MaxContext+63)/64))
	}
	maxSplits := w.Splits * w.Seqs * w.Heads / (a.Seqs * a.Heads)
	splits = min(splits, maxSplits, a.MaxContext)
	splitLen := (a.MaxContext + splits - 1) / splits
	splits = (a.MaxContext + splitLen - 1) / splitLen
	var err error
	if gqa {
		err = o.Dev.Launch(o.Kern.mod, fmt.Sprintf("attn_decode_gqa%d_%s", hd/32, suffix(c.K.DType)), Dim3{splits, c.KVHeads, a.Seqs},
			Dim3{128, 1, 1}, 0, a.Q, a.QStride, c.K, c.V, a.BlockTables, a.MaxBlocks, a.ContextLens, w.M, w.L, w.O,
			a.Heads, c.KVHeads, c.BlockSize, splitLen, a.Scale)
	} else {
		err = o.Dev.Launch(o.Kern.mod, "attn_decode_"+suffix(c.K.DType), Dim3{splits, a.Heads, a.Seqs}, Dim3{128, 1, 1}, 0,
			a.Q, a.QStride, c.K, c.V, a.BlockTables, a.MaxBlocks, a.ContextLens, w.M, w.L, w.O,
			a.Heads, c.KVHeads, hd, c.BlockSize, splitLen, a.Scale)
	}
	if err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "attn_combine_"+suffix(a.Out.DType), Dim3{a.Heads, a.Seqs, 1}, Dim3{128, 1, 1}, 0,
		a.Out, a.OutStride, w.M, w.L, w.O, splits, a.Heads, hd)
}

// PrefillArgs are the operands of AttentionPrefill: variable-length query chunks of Seqs
// sequences, concatenated.
type PrefillArgs struct {
	Out       Buffer // [Tokens] rows at OutStride (F32, F16 or BF16)
	OutStride int
	Q         Buffer // F32 [Tokens] rows at QStride
	QStride   int
	Tokens    int
	Seqs      int
	Heads     int
	Cache     *KVCacheLayer
	// SeqStarts (I32 [Seqs+1]) gives each sequence's first token; ContextLens (I32 [Seqs])
	// each sequence's context after the step, its query tokens last: the i-th of a
	// sequence's q tokens sits at index ContextLens[s]-q+i of its context and attends to
	// the context's cached positions 0..that index, which must be written already
	// (prefix-cache hits included). RoPE positions play no part.
	SeqStarts, ContextLens Buffer
	// MaxQueryLen bounds every sequence's token count; it sizes the grid.
	MaxQueryLen int
	BlockTables Buffer // I32 [Seqs][MaxBlocks]
	MaxBlocks   int
	Scale       float32
	// scalar forces the scalar-FMA kernel where the tensor-core one would run (tests and
	// benchmarks compare the two).
	scalar bool
}

// prefillTile is the query tokens one prefill block handles (PF_TQ in attention.cu).
const prefillTile = 16

// prefillTileTC is the query tokens one tensor-core prefill block handles (TC_BQ).
const prefillTileTC = 64

// prefillTensorCores reports whether the tensor-core prefill kernel (attn_prefill_tc*)
// serves a cache of dtype dt and head size hd.
func prefillTensorCores(dt DType, hd int) bool { return dt == BF16 && (hd == 64 || hd == 128) }

// AttentionPrefill runs causal attention of variable-length query chunks over the paged
// cache, FlashAttention-style. A BF16 cache with head size 64 or 128 runs on tensor cores
// (mma.sync, 64 queries of one head per block, Q rounded to BF16); other caches use
// K/V tiles in shared memory that serve 16 queries of one head with scalar FMAs. A
// quantized cache takes the tensor-core kernel too (head sizes 64 and 128, F32 out), its
// tiles dequantized and rounded to BF16 as they are loaded, else the scalar one over tiles
// dequantized to float32 (any head size).
func (o *Ops) AttentionPrefill(a PrefillArgs) error {
	c := a.Cache
	if err := c.checkTiled("attention prefill"); err != nil {
		return err
	}
	hd := c.HeadDim
	if a.Tokens <= 0 || a.Seqs <= 0 || a.Heads <= 0 || a.Heads%c.KVHeads != 0 || a.MaxQueryLen <= 0 || a.MaxBlocks <= 0 {
		return fmt.Errorf("cuda attention prefill: bad shape tokens=%d seqs=%d heads=%d kvHeads=%d maxQuery=%d maxBlocks=%d",
			a.Tokens, a.Seqs, a.Heads, c.KVHeads, a.MaxQueryLen, a.MaxBlocks)
	}
	if a.QStride < a.Heads*hd || a.OutStride < a.Heads*hd {
		return fmt.Errorf("cuda attention prefill: strides q=%d out=%d below %d", a.QStride, a.OutStride, a.Heads*hd)
	}
	last := a.Tokens - 1
	if err := firstErr(need("attention prefill", "out", a.Out, last*a.OutStride+a.Heads*hd, F32, F16, BF16),
		need("attention prefill", "q", a.Q, last*a.QStride+a.Heads*hd, F32),
		need("attention prefill", "seq starts", a.SeqStarts, a.Seqs+1, I32),
		need("attention prefill", "context lengths", a.ContextLens, a.Seqs, I32),
		need("attention prefill", "block tables", a.BlockTables, a.Seqs*a.MaxBlocks, I32)); err != nil {
		return err
	}
	if c.Quantized() {
		if quantizedTensorCores(hd, a.Out.DType) && !a.scalar {
			return o.prefillQuantizedTC(a)
		}
		return o.prefillQuantized(a, 0, 0)
	}
	if prefillTensorCores(c.K.DType, hd) && !a.scalar {
		tiles := (a.MaxQueryLen + prefillTileTC - 1) / prefillTileTC
		return o.Dev.Launch(o.Kern.mod, fmt.Sprintf("attn_prefill_tc%d_bf16_%s", hd, suffix(a.Out.DType)), Dim3{tiles, a.Heads, a.Seqs},
			Dim3{128, 1, 1}, 0, a.Out, a.OutStride, a.Q, a.QStride, c.K, c.V, a.BlockTables, a.MaxBlocks, a.SeqStarts,
			a.ContextLens, a.Heads, c.KVHeads, c.BlockSize, a.Scale)
	}
	name := "attn_prefill_" + suffix(c.K.DType) + "_" + suffix(a.Out.DType)
	tiles := (a.MaxQueryLen + prefillTile - 1) / prefillTile
	return o.Dev.Launch(o.Kern.mod, name, Dim3{tiles, a.Heads, a.Seqs}, Dim3{128, 1, 1}, 0,
		a.Out, a.OutStride, a.Q, a.QStride, c.K, c.V, a.BlockTables, a.MaxBlocks, a.SeqStarts, a.ContextLens,
		a.Heads, c.KVHeads, hd, c.BlockSize, a.Scale)
}
