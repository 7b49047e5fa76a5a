package cpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/kvquant"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// KVCacheLayer holds one layer's keys and values in fixed-size physical blocks. The cache
// is flat: NumBlocks blocks, each [BlockSize][KVHeads][HeadDim], so the vector of kv head h
// at slot s (s = block*BlockSize + offset) starts at element (s*KVHeads + h)*HeadDim.
//
// DType is the element type. An F32 cache keeps its values in K and V. An F16 cache keeps
// them in K16 and V16 as little-endian IEEE halves, two bytes each: half the memory, and
// half the bytes a decode step reads; attention's kernels widen the halves to float32 as
// they load them, so its arithmetic is the F32 cache's over the rounded values.
//
// A quantized cache (quant.KVInt8, KVFP8E4M3, KVFP8E5M2; see package kvquant) keeps one
// code byte per element in K8 and V8, laid out as K, and a float32 scale per group of
// kvquant.Group(HeadDim) elements of a head vector in KS and VS ([slot][KVHeads][groups]).
// Attention dequantizes a block's vectors of one kv head as it reaches them and runs the
// F32 kernels over them.
//
// With ValuesAreKeys (NewKeysOnlyKVCacheLayer) the values are the keys: V, V16, V8 and VS
// are K, K16, K8 and KS themselves, held once; WriteKV stores the keys alone.
type KVCacheLayer struct {
	BlockSize, KVHeads, HeadDim int
	DType                       quant.Type
	ValuesAreKeys               bool
	K, V                        []float32 // F32 cache
	K16, V16                    []byte    // F16 cache
	K8, V8                      []byte    // quantized cache: codes
	KS, VS                      []float32 // quantized cache: scales

	codec   *kvquant.Codec // quantized cache
	f8Shift int            // an FP8 cache's quant.FP8Format.Widen
	f8Mul   float32
}

// NewKVCacheLayer allocates a zeroed cache layer of numBlocks blocks of dtype elements
// (quant.F32, quant.F16 or a quantized type: quant.KVInt8, KVFP8E4M3, KVFP8E5M2).
func NewKVCacheLayer(numBlocks, blockSize, kvHeads, headDim int, dtype quant.Type) (*KVCacheLayer, error) {
	return newKVCacheLayer(numBlocks, blockSize, kvHeads, headDim, dtype, false)
}

// NewKeysOnlyKVCacheLayer is NewKVCacheLayer for a layer whose values are its keys
// (ValuesAreKeys): every vector held once.
func NewKeysOnlyKVCacheLayer(numBlocks, blockSize, kvHeads, headDim int, dtype quant.Type) (*KVCacheLayer, error) {
	return newKVCacheLayer(numBlocks, blockSize, kvHeads, headDim, dtype, true)
}

// zeroedLike returns a zeroed slice of s's length (nil for nil).
func zeroedLike[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return make([]T, len(s))
}

// newKVCacheLayer allocates a layer, its values the keys when keysOnly is set.
func newKVCacheLayer(numBlocks, blockSize, kvHeads, headDim int, dtype quant.Type, keysOnly bool) (*KVCacheLayer, error) {
	if numBlocks <= 0 || blockSize <= 0 || kvHeads <= 0 || headDim <= 0 {
		return nil, fmt.Errorf("cpu: kv cache: bad shape blocks=%d blockSize=%d kvHeads=%d headDim=%d", numBlocks, blockSize, kvHeads, headDim)
	}
	n := numBlocks * blockSize * kvHeads * headDim
	c := &KVCacheLayer{BlockSize: blockSize, KVHeads: kvHeads, HeadDim: headDim, DType: dtype, ValuesAreKeys: keysOnly}
	switch dtype {
	case quant.F32:
		c.K = make([]float32, n)
	case quant.F16:
		c.K16 = make([]byte, 2*n)
	case quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2:
		c.codec, _ = kvquant.NewCodec(dtype)
		if f := c.codec.FP8(); f != nil {
			c.f8Shift, c.f8Mul = f.Widen()
		}
		c.K8, c.KS = make([]byte, n), make([]float32, n/kvquant.Group(headDim))
	default:
		return nil, fmt.Errorf("cpu: kv cache: %s elements (the CPU cache holds f32, f16, int8, fp8_e4m3 or fp8_e5m2)", dtype)
	}
	c.V, c.V16, c.V8, c.VS = c.K, c.K16, c.K8, c.KS
	if !keysOnly {
		// Fresh zeroed buffers, not copies of the keys': make leaves the pages untouched until
		// a token is written, where a copy would make the whole cache resident at once.
		c.V, c.V16, c.V8, c.VS = zeroedLike(c.K), zeroedLike(c.K16), zeroedLike(c.K8), zeroedLike(c.KS)
	}
	return c, nil
}

// quantized reports whether the layer holds codes and scales.
func (c *KVCacheLayer) quantized() bool { return c.DType.KVQuantized() }

// group returns the elements per scale of a quantized layer.
func (c *KVCacheLayer) group() int { return kvquant.Group(c.HeadDim) }

// elements returns how many values K (and V) hold.
func (c *KVCacheLayer) elements() int {
	switch {
	case c.DType == quant.F16:
		return min(len(c.K16), len(c.V16)) / 2
	case c.quantized():
		return min(len(c.K8), len(c.V8), len(c.KS)*c.group(), len(c.VS)*c.group())
	}
	return min(len(c.K), len(c.V))
}

// NumBlocks returns how many physical blocks the layer holds.
func (c *KVCacheLayer) NumBlocks() int {
	per := c.BlockSize * c.KVHeads * c.HeadDim
	if per <= 0 {
		return 0
	}
	return c.elements() / per
}

func (c *KVCacheLayer) check() error {
	if c == nil || c.BlockSize <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 ||
		(c.DType != quant.F32 && c.DType != quant.F16 && !(c.quantized() && c.codec != nil && c.codec.Type == c.DType)) {
		return fmt.Errorf("cpu: kv cache: bad layer of %d kv heads of %d, blocks of %d, %s elements", c.KVHeads, c.HeadDim, c.BlockSize, c.DType)
	}
	return nil
}

// CopyBlock copies the keys and values of block src into block dst (copy-on-write; the
// values of a layer whose values are its keys are copied as they are, the same bytes again).
func (c *KVCacheLayer) CopyBlock(dst, src int) error {
	n := c.NumBlocks()
	if src < 0 || dst < 0 || src >= n || dst >= n {
		return fmt.Errorf("cpu: kv cache: copy block %d to %d: outside the cache's %d blocks", src, dst, n)
	}
	per := c.BlockSize * c.KVHeads * c.HeadDim
	if c.quantized() {
		copy(c.K8[dst*per:][:per], c.K8[src*per:][:per])
		copy(c.V8[dst*per:][:per], c.V8[src*per:][:per])
		g := per / c.group()
		copy(c.KS[dst*g:][:g], c.KS[src*g:][:g])
		copy(c.VS[dst*g:][:g], c.VS[src*g:][:g])
		return nil
	}
	if c.DType == quant.F16 {
		per *= 2
		copy(c.K16[dst*per:][:per], c.K16[src*per:][:per])
		copy(c.V16[dst*per:][:per], c.V16[src*per:][:per])
		return nil
	}
	copy(c.K[dst*per:][:per], c.K[src*per:][:per])
	copy(c.V[dst*per:][:per], c.V[src*per:][:per])
	return nil
}

// WriteKV stores the keys and values of len(slotMapping) new tokens (k and v laid out
// [tokens][KVHeads][HeadDim]) into the cache, rounded to F16 in an F16 cache and
// quantized, each group with its own scale, in a quantized one: token t goes
// to slot slotMapping[t] (= physical block * BlockSize + offset). A negative slot skips the
// token (padding). A layer whose values are its keys stores k alone (v is not read).
func WriteKV(kv *KVCacheLayer, k, v []float32, slotMapping []int32) error {
	if err := kv.check(); err != nil {
		return err
	}
	row := kv.KVHeads * kv.HeadDim
	n := len(slotMapping)
	if len(k) < n*row || len(v) < n*row {
		return fmt.Errorf("cpu: write kv: k has %d, v %d values, need %d tokens x %d", len(k), len(v), n, row)
	}
	slots := kv.NumBlocks() * kv.BlockSize
	for t, s := range slotMapping {
		if s < 0 {
			continue
		}
		if int(s) >= slots {
			return fmt.Errorf("cpu: write kv: token %d: slot %d outside the cache's %d slots", t, s, slots)
		}
		values := !kv.ValuesAreKeys
		if kv.quantized() {
			g := kv.group()
			kv.codec.Quantize(kv.K8[int(s)*row:][:row], kv.KS[int(s)*row/g:], k[t*row:][:row], g)
			if values {
				kv.codec.Quantize(kv.V8[int(s)*row:][:row], kv.VS[int(s)*row/g:], v[t*row:][:row], g)
			}
			continue
		}
		if kv.DType == quant.F16 {
			putF16s(kv.K16[2*int(s)*row:][:2*row], k[t*row:][:row])
			if values {
				putF16s(kv.V16[2*int(s)*row:][:2*row], v[t*row:][:row])
			}
			continue
		}
		copy(kv.K[int(s)*row:][:row], k[t*row:][:row])
		if values {
			copy(kv.V[int(s)*row:][:row], v[t*row:][:row])
		}
	}
	return nil
}

// putF16s writes src to dst as little-endian halves (round to nearest even).
func putF16s(dst []byte, src []float32) {
	dst = dst[:2*len(src)]
	for i, x := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], quant.F32ToF16(x))
	}
}

// attnTileTokens is how many query tokens one attention work unit handles: every K/V block
// it loads serves all of them and all query heads of one kv head.
const attnTileTokens = 16

// Attention computes causal multi-head attention of nTokens query tokens of one sequence
// over its paged cache. q and out are [nTokens][heads][HeadDim]; query head h uses kv head
// h / (heads/KVHeads) (grouped-query attention; heads must be a multiple of KVHeads).
// blockTable maps the sequence's logical blocks to physical blocks of kv; token t, at index
// ctxIndex[t] of its sequence's context, attends to the cached positions 0..ctxIndex[t] of
// the context (logical slots through blockTable), which must already be written (WriteKV
// the chunk's own K/V first). Softmax is taken of scale * q·k. (A token's RoPE position,
// applied to q and k before, is none of this kernel's business.)
//
// It runs FlashAttention-style: K/V are read block by block with an online softmax, so
// memory stays O(tokens x heads x HeadDim) whatever the context length. The context is cut
// at fixed places into chunks of attnChunkPositions positions; each chunk's softmax state
// is taken on its own and the states are folded together in chunk order, so a token's
// output depends only on its context index, its query and the cache: not on the thread count,
// the other tokens of its chunk or the other sequences of its step (greedy output does not
// change with batching, chunked prefill or prefix caching). Work is split over (token tile,
// kv head) units; a decode step with few kv heads runs its chunks as units of their own
// (flash-decoding), or one unit per query head.
func Attention(p *Pool, out, q []float32, nTokens, heads int, kv *KVCacheLayer, blockTable []int32, ctxIndex []int32, scale float32) error {
	return AttentionWith(p, out, q, nTokens, heads, kv, blockTable, ctxIndex, AttnOptions{Scale: scale})
}

// AttnOptions are the settings of an attention call: the scores' scale and, optionally, a
// sliding window and soft-capping.
type AttnOptions struct {
	Scale float32
	// Window, when > 0, lets the token at context index i see only the entries
	// i-Window+1..i.
	Window int
	// Softcap, when > 0, maps each scaled score s to Softcap * tanh(s / Softcap) (see
	// Softcap).
	Softcap float32
}

// AttentionWith is Attention with options: the same computation, each token's context cut
// to its window and its scores soft-capped when opt asks. Blocks wholly before a token's
// window are skipped; the chunks are cut at the same places, so a token's output still
// depends only on its context index, its query and the cache.
func AttentionWith(p *Pool, out, q []float32, nTokens, heads int, kv *KVCacheLayer, blockTable []int32, ctxIndex []int32, opt AttnOptions) error {
	if err := kv.check(); err != nil {
		return err
	}
	if heads <= 0 || heads%kv.KVHeads != 0 {
		return fmt.Errorf("cpu: attention: %d heads is not a multiple of %d kv heads", heads, kv.KVHeads)
	}
	maxPos, err := checkAttention(out, q, nTokens, heads, kv, blockTable, ctxIndex)
	if err != nil {
		return err
	}
	if nTokens == 0 {
		return nil
	}
	a := attnJob{k: p.kern, out: out, q: q, nTokens: nTokens, heads: heads, kv: kv,
		blockTable: blockTable, ctxIndex: ctxIndex, scale: opt.Scale, window: opt.Window, softcap: opt.Softcap,
		chunk: attnChunkPositions}
	a.run(p, maxPos)
	return nil
}

// checkAttention validates the arguments of one sequence's attention (kv already checked)
// and returns the largest context index of its tokens.
func checkAttention(out, q []float32, nTokens, heads int, kv *KVCacheLayer, blockTable []int32, ctxIndex []int32) (int, error) {
	hd := kv.HeadDim
	if err := checkRows("attention", heads*hd, nTokens, len(q), len(out)); err != nil {
		return 0, err
	}
	if nTokens < 0 {
		return 0, fmt.Errorf("cpu: attention: %d tokens", nTokens)
	}
	if nTokens == 0 {
		return 0, nil // nothing to compute
	}
	if len(ctxIndex) < nTokens {
		return 0, fmt.Errorf("cpu: attention: %d context indices for %d tokens", len(ctxIndex), nTokens)
	}
	nBlocks := kv.NumBlocks()
	for t, pos := range ctxIndex[:nTokens] {
		if pos < 0 || int(pos)/kv.BlockSize >= len(blockTable) {
			return 0, fmt.Errorf("cpu: attention: token %d: context index %d outside the block table (%d blocks of %d)", t, pos, len(blockTable), kv.BlockSize)
		}
	}
	maxPos := int(ctxIndex[0])
	for _, pos := range ctxIndex[:nTokens] {
		maxPos = max(maxPos, int(pos))
	}
	for i, b := range blockTable[:maxPos/kv.BlockSize+1] {
		if b < 0 || int(b) >= nBlocks {
			return 0, fmt.Errorf("cpu: attention: block table entry %d: block %d outside the cache's %d blocks", i, b, nBlocks)
		}
	}
	return maxPos, nil
}

// attnChunkPositions is the size, in cached positions, of the chunks attention folds one
// after another (a whole number of blocks: max(1, attnChunkPositions/BlockSize) of them).
const attnChunkPositions = 128

// attnPrefetchBlocks is how many cache blocks ahead of the one being read partial asks for:
// a decode step finds its layer's keys and values out of cache (the weights of the whole
// model went through since), and their rows are too short and far apart for the hardware
// prefetchers.
const attnPrefetchBlocks = 10

// attnJob is one Attention call's arguments.
type attnJob struct {
	k                    *kernels
	out, q               []float32
	nTokens, heads       int
	kv                   *KVCacheLayer
	blockTable, ctxIndex []int32 // ctxIndex: each token's index in its sequence's context
	scale                float32
	window               int     // > 0: each token sees its last window entries only
	softcap              float32 // > 0: scores soft-capped (Softcap)
	chunk                int     // positions per folded chunk (attnChunkPositions; tests use less)
}

// windowStart returns the first context entry token t sees.
func (a *attnJob) windowStart(t int) int {
	if a.window <= 0 {
		return 0
	}
	return max(0, int(a.ctxIndex[t])-a.window+1)
}

// chunkBlocks returns the cache blocks of one folded chunk.
func (a *attnJob) chunkBlocks() int { return max(1, a.chunk/a.kv.BlockSize) }

// run computes the attention. With more than one token tile, or kv heads enough to give
// every thread 4 units, the units are (token tile, kv head), each folding its chunks in
// turn. A single tile (decode) with few kv heads runs (kv head, chunk) units when the
// context spans several chunks, their states kept and folded afterwards (flash-decoding),
// else one unit per query head. The arithmetic of every token is the same on each path.
func (a *attnJob) run(p *Pool, maxPos int) {
	kv := a.kv
	hd := kv.HeadDim
	group := a.heads / kv.KVHeads
	tiles := (a.nTokens + attnTileTokens - 1) / attnTileTokens
	units := tiles * kv.KVHeads
	ctxBlocks := maxPos/kv.BlockSize + 1
	cb := a.chunkBlocks()
	nChunks := (ctxBlocks + cb - 1) / cb
	few := tiles == 1 && units < 4*p.Threads()
	switch {
	case few && nChunks == 1 && group > 1:
		// One unit per query head balances the threads better.
		p.Run(kv.KVHeads*group, func(start, end int) {
			st := p.attnStates.get(a.nTokens*group, hd, kv.BlockSize)
			for u := start; u < end; u++ {
				kvh, g := u/group, u%group
				a.whole(st, 0, kvh, g, g+1, ctxBlocks)
				a.finish(st, 0, kvh, g, g+1)
			}
			p.attnStates.put(st)
		})
		return
	case !few || nChunks == 1:
		p.Run(units, func(start, end int) {
			st := p.attnStates.get(attnTileTokens*group, hd, kv.BlockSize)
			for u := start; u < end; u++ {
				tile, kvh := u/kv.KVHeads, u%kv.KVHeads
				a.whole(st, tile, kvh, 0, group, ctxBlocks)
				a.finish(st, tile, kvh, 0, group)
			}
			p.attnStates.put(st)
		})
		return
	}

	rows := a.nTokens * group
	slot := rows * (hd + 2) // one chunk's m, l and acc
	p.attnMu.Lock()
	defer p.attnMu.Unlock()
	if n := kv.KVHeads * nChunks * slot; cap(p.attnScratch) < n {
		p.attnScratch = make([]float32, n)
	}
	part := p.attnScratch[:kv.KVHeads*nChunks*slot]
	p.Run(kv.KVHeads*nChunks, func(start, end int) {
		st := p.attnStates.get(rows, hd, kv.BlockSize)
		defer p.attnStates.put(st)
		for u := start; u < end; u++ {
			kvh, c := u/nChunks, u%nChunks
			lb0, lb1 := c*cb, min((c+1)*cb, ctxBlocks)
			a.partial(st, 0, kvh, 0, group, lb0, lb1, lb1, true)
			dst := part[u*slot : (u+1)*slot]
			copy(dst, st.m[:rows])
			copy(dst[rows:], st.l[:rows])
			copy(dst[2*rows:], st.acc[:rows*hd])
		}
	})
	p.Run(kv.KVHeads, func(start, end int) {
		st := p.attnStates.get(rows, hd, kv.BlockSize)
		defer p.attnStates.put(st)
		for kvh := start; kvh < end; kvh++ {
			st.clearFolded(rows, hd)
			for c := range nChunks {
				ch := part[(kvh*nChunks+c)*slot:][:slot]
				st.fold(ch[:rows], ch[rows:2*rows], ch[2*rows:], rows, hd)
			}
			a.finish(st, 0, kvh, 0, group)
		}
	})
}

// whole runs the online softmax of query heads g0..g1-1 of kv head kvh for the tokens of
// tile over the first ctxBlocks cache blocks, one chunk at a time, folding each chunk's
// state into st's folded state in order.
func (a *attnJob) whole(st *attnState, tile, kvh, g0, g1, ctxBlocks int) {
	group := a.heads / a.kv.KVHeads
	t0 := tile * attnTileTokens
	rows := (min(t0+attnTileTokens, a.nTokens) - t0) * group
	st.clearFolded(rows, a.kv.HeadDim)
	cb := a.chunkBlocks()
	for c0 := 0; c0 < ctxBlocks; c0 += cb {
		a.partial(st, tile, kvh, g0, g1, c0, min(c0+cb, ctxBlocks), ctxBlocks, c0 == 0)
		st.fold(st.m, st.l, st.acc, rows, a.kv.HeadDim)
	}
}

// attnState is a work unit's online-softmax state, one row per (token, query head): that
// of the chunk being run, and the fold of the chunks before it.
type attnState struct {
	m, l   []float32 // running max and sum of exponentials of the chunk
	acc    []float32 // running weighted sum of values of the chunk, [rows][HeadDim]
	scores []float32 // one block's scores
	kq, vq []float32 // a quantized cache's block of one kv head, dequantized: [BlockSize][HeadDim]

	fm, fl, facc []float32 // the folded max, sum and weighted values of the chunks so far
}

// clearFolded empties the folded state of rows rows.
func (st *attnState) clearFolded(rows, hd int) {
	for r := range rows {
		st.fm[r], st.fl[r] = float32(math.Inf(-1)), 0
	}
	clear(st.facc[:rows*hd])
}

// fold merges a chunk's state (max m, sum l, weighted values acc of rows rows) into the
// folded state: both are rescaled to the larger max and added. A row that saw nothing of
// the chunk (max -Inf) is left as it is. Chunks must be folded in order for the result
// not to depend on how they were computed.
func (st *attnState) fold(m, l, acc []float32, rows, hd int) {
	for r := range rows {
		if math.IsInf(float64(m[r]), -1) {
			continue
		}
		mx := max(st.fm[r], m[r])
		fOld := float32(math.Exp(float64(st.fm[r] - mx))) // 0 for the first chunk
		fNew := float32(math.Exp(float64(m[r] - mx)))
		st.fl[r] = st.fl[r]*fOld + l[r]*fNew
		dst, src := st.facc[r*hd:(r+1)*hd], acc[r*hd:(r+1)*hd]
		for i, v := range src {
			dst[i] = dst[i]*fOld + v*fNew
		}
		st.fm[r] = mx
	}
}

// partial runs the online softmax of query heads g0..g1-1 of the group of kv head kvh for
// the tokens of tile over the logical cache blocks [lb0, lb1), leaving the running max, sum
// and weighted values in st (row (t-t0)*group+g for token t and head g). While one block
// is processed, the keys and values attnPrefetchBlocks blocks further are prefetched, up
// to block reach (the end of the unit's blocks, which may go on past lb1); a cold call,
// which no earlier call of its unit prefetched for, first asks for its own first blocks.
func (a *attnJob) partial(st *attnState, tile, kvh, g0, g1, lb0, lb1, reach int, cold bool) {
	kv, hd := a.kv, a.kv.HeadDim
	group := a.heads / kv.KVHeads
	t0 := tile * attnTileTokens
	t1 := min(t0+attnTileTokens, a.nTokens)
	rows := (t1 - t0) * group
	for i := range rows {
		st.m[i], st.l[i] = float32(math.Inf(-1)), 0
	}
	clear(st.acc[:rows*hd])
	maxPos := 0
	for t := t0; t < t1; t++ {
		maxPos = max(maxPos, int(a.ctxIndex[t]))
	}
	seen := maxPos/kv.BlockSize + 1 // the blocks any token of the tile sees
	end, reach := min(lb1, seen), min(reach, seen)
	if cold {
		for lb := lb0; lb < min(end, lb0+attnPrefetchBlocks); lb++ {
			a.prefetchBlock(lb, kvh, maxPos)
		}
	}
	for lb := lb0; lb < end; lb++ {
		if ahead := lb + attnPrefetchBlocks; ahead < reach {
			a.prefetchBlock(ahead, kvh, maxPos)
		}
		blockBase := int(a.blockTable[lb]) * kv.BlockSize
		if kv.quantized() {
			a.dequantBlock(st, blockBase, kvh, min(kv.BlockSize, maxPos-lb*kv.BlockSize+1))
		}
		for t := t0; t < t1; t++ {
			// Positions j0..n-1 of this block are those token t sees.
			n := min(kv.BlockSize, int(a.ctxIndex[t])-lb*kv.BlockSize+1)
			j0 := max(0, a.windowStart(t)-lb*kv.BlockSize)
			if n <= j0 {
				continue
			}
			base := blockBase + j0
			for g := g0; g < g1; g++ {
				h := kvh*group + g
				r := (t-t0)*group + g
				qv := a.q[(t*a.heads+h)*hd:][:hd]
				sc := st.scores[:n-j0]
				if kv.quantized() {
					a.k.attnScores(sc, qv, st.kq[j0*hd:], hd)
				} else {
					a.scores(sc, qv, base, kvh)
				}
				bmax := scaleMax(sc, a.scale)
				if a.softcap > 0 {
					for j, v := range sc {
						sc[j] = Softcap(v, a.softcap)
					}
					bmax = Softcap(bmax, a.softcap)
				}
				acc := st.acc[r*hd : (r+1)*hd]
				if bmax > st.m[r] {
					// A new max rescales what was summed so far; before the first block of
					// the chunk there is nothing (l and acc are zero, and stay so).
					if !math.IsInf(float64(st.m[r]), -1) {
						c := float32(math.Exp(float64(st.m[r] - bmax)))
						st.l[r] *= c
						for i := range acc {
							acc[i] *= c
						}
					}
					st.m[r] = bmax
				}
				m := st.m[r]
				for j := range sc {
					sc[j] -= m
				}
				a.k.exp(sc, sc)
				l := st.l[r]
				for _, e := range sc {
					l += e
				}
				st.l[r] = l
				if kv.quantized() {
					a.k.attnWsum(acc, sc, st.vq[j0*hd:], hd)
				} else {
					a.wsum(acc, sc, base, kvh)
				}
			}
		}
	}
}

// scaleMax multiplies the scores sc by scale and returns their largest value (-Inf for
// none). Four running maxima keep the compare chains short; max is exact, so their order
// does not change the result.
func scaleMax(sc []float32, scale float32) float32 {
	negInf := float32(math.Inf(-1))
	m0, m1, m2, m3 := negInf, negInf, negInf, negInf
	j := 0
	for ; j+4 <= len(sc); j += 4 {
		v := sc[j : j+4 : j+4]
		v[0] *= scale
		v[1] *= scale
		v[2] *= scale
		v[3] *= scale
		m0, m1, m2, m3 = max(m0, v[0]), max(m1, v[1]), max(m2, v[2]), max(m3, v[3])
	}
	for ; j < len(sc); j++ {
		sc[j] *= scale
		m0 = max(m0, sc[j])
	}
	return max(m0, m1, m2, m3)
}

// dequantBlock writes the keys and values of kv head kvh at the first n positions of the
// block whose first slot is base, dequantized, to st.kq and st.vq ([n][HeadDim]).
func (a *attnJob) dequantBlock(st *attnState, base, kvh, n int) {
	kv, hd := a.kv, a.kv.HeadDim
	g := kv.group()
	off, stride := a.vectors(base, kvh)
	a.dequantRows(st.kq[:n*hd], kv.K8[off:], stride, kv.KS[off/g:], stride/g, n)
	a.dequantRows(st.vq[:n*hd], kv.V8[off:], stride, kv.VS[off/g:], stride/g, n)
}

// dequantRows writes the values of rows head vectors, stride codes (and stride/group
// scales) apart from codes (and scales) on, to dst.
func (a *attnJob) dequantRows(dst []float32, codes []byte, stride int, scales []float32, sstride, rows int) {
	hd, g := a.kv.HeadDim, a.kv.group()
	if a.kv.f8Mul != 0 {
		a.k.dequantF8(dst, codes, stride, scales, sstride, rows, hd/g, g, a.kv.f8Shift, a.kv.f8Mul)
		return
	}
	a.k.dequantI8(dst, codes, stride, scales, sstride, rows, hd/g, g)
}

// scores sets sc[j] to q · the key of kv head kvh at position j of the block whose first
// slot is base.
func (a *attnJob) scores(sc, q []float32, base, kvh int) {
	off, stride := a.vectors(base, kvh)
	if a.kv.quantized() {
		hd, g := a.kv.HeadDim, a.kv.group()
		keys := make([]float32, len(sc)*hd)
		a.dequantRows(keys, a.kv.K8[off:], stride, a.kv.KS[off/g:], stride/g, len(sc))
		a.k.attnScores(sc, q, keys, hd)
		return
	}
	if a.kv.DType == quant.F16 {
		a.k.attnScoresF16(sc, q, a.kv.K16[2*off:], stride)
		return
	}
	a.k.attnScores(sc, q, a.kv.K[off:], stride)
}

// wsum adds e[j] times the value of kv head kvh at position j of the block whose first
// slot is base to acc.
func (a *attnJob) wsum(acc, e []float32, base, kvh int) {
	off, stride := a.vectors(base, kvh)
	if a.kv.DType == quant.F16 {
		a.k.attnWsumF16(acc, e, a.kv.V16[2*off:], stride)
		return
	}
	a.k.attnWsum(acc, e, a.kv.V[off:], stride)
}

// vectors returns the element offset of kv head kvh's vector at slot base and the distance
// from one slot's vector to the next.
func (a *attnJob) vectors(base, kvh int) (off, stride int) {
	stride = a.kv.KVHeads * a.kv.HeadDim
	return base*stride + kvh*a.kv.HeadDim, stride
}

// prefetchBlock starts loading the keys and values of kv head kvh in logical block lb,
// as far as position maxPos.
func (a *attnJob) prefetchBlock(lb, kvh, maxPos int) {
	kv := a.kv
	n := min(kv.BlockSize, maxPos-lb*kv.BlockSize+1)
	off, stride := a.vectors(int(a.blockTable[lb])*kv.BlockSize, kvh)
	if kv.quantized() {
		a.k.prefetchRows(kv.K8[off:], stride, n, kv.HeadDim)
		a.k.prefetchRows(kv.V8[off:], stride, n, kv.HeadDim)
		return
	}
	if kv.DType == quant.F16 {
		a.k.prefetchRows(kv.K16[2*off:], 2*stride, n, 2*kv.HeadDim)
		a.k.prefetchRows(kv.V16[2*off:], 2*stride, n, 2*kv.HeadDim)
		return
	}
	a.k.prefetchRows(f32Bytes(kv.K[off:]), 4*stride, n, 4*kv.HeadDim)
	a.k.prefetchRows(f32Bytes(kv.V[off:]), 4*stride, n, 4*kv.HeadDim)
}

// finish writes the outputs of query heads g0..g1-1 from the folded state of the whole
// context.
func (a *attnJob) finish(st *attnState, tile, kvh, g0, g1 int) {
	hd := a.kv.HeadDim
	group := a.heads / a.kv.KVHeads
	t0 := tile * attnTileTokens
	t1 := min(t0+attnTileTokens, a.nTokens)
	for t := t0; t < t1; t++ {
		for g := g0; g < g1; g++ {
			h := kvh*group + g
			r := (t-t0)*group + g
			inv := 1 / st.fl[r]
			o := a.out[(t*a.heads+h)*hd:][:hd]
			for i, v := range st.facc[r*hd : (r+1)*hd] {
				o[i] = v * inv
			}
		}
	}
}
