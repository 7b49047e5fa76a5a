package cpu

import (
	"encoding/binary"
	"fmt"
	"math"

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
type KVCacheLayer struct {
	BlockSize, KVHeads, HeadDim int
	DType                       quant.Type
	K, V                        []float32 // F32 cache
	K16, V16                    []byte    // F16 cache
}

// NewKVCacheLayer allocates a zeroed cache layer of numBlocks blocks of dtype elements
// (quant.F32 or quant.F16).
func NewKVCacheLayer(numBlocks, blockSize, kvHeads, headDim int, dtype quant.Type) (*KVCacheLayer, error) {
	if numBlocks <= 0 || blockSize <= 0 || kvHeads <= 0 || headDim <= 0 {
		return nil, fmt.Errorf("cpu: kv cache: bad shape blocks=%d blockSize=%d kvHeads=%d headDim=%d", numBlocks, blockSize, kvHeads, headDim)
	}
	n := numBlocks * blockSize * kvHeads * headDim
	c := &KVCacheLayer{BlockSize: blockSize, KVHeads: kvHeads, HeadDim: headDim, DType: dtype}
	switch dtype {
	case quant.F32:
		c.K, c.V = make([]float32, n), make([]float32, n)
	case quant.F16:
		c.K16, c.V16 = make([]byte, 2*n), make([]byte, 2*n)
	default:
		return nil, fmt.Errorf("cpu: kv cache: %s elements (the CPU cache holds f32 or f16)", dtype)
	}
	return c, nil
}

// elements returns how many values K (and V) hold.
func (c *KVCacheLayer) elements() int {
	if c.DType == quant.F16 {
		return min(len(c.K16), len(c.V16)) / 2
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
	if c == nil || c.BlockSize <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || (c.DType != quant.F32 && c.DType != quant.F16) {
		return fmt.Errorf("cpu: kv cache: bad layer %+v", c)
	}
	return nil
}

// CopyBlock copies the keys and values of block src into block dst (copy-on-write).
func (c *KVCacheLayer) CopyBlock(dst, src int) error {
	n := c.NumBlocks()
	if src < 0 || dst < 0 || src >= n || dst >= n {
		return fmt.Errorf("cpu: kv cache: copy block %d to %d: outside the cache's %d blocks", src, dst, n)
	}
	per := c.BlockSize * c.KVHeads * c.HeadDim
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
// [tokens][KVHeads][HeadDim]) into the cache, rounded to F16 in an F16 cache: token t goes
// to slot slotMapping[t] (= physical block * BlockSize + offset). A negative slot skips the
// token (padding).
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
		if kv.DType == quant.F16 {
			putF16s(kv.K16[2*int(s)*row:][:2*row], k[t*row:][:row])
			putF16s(kv.V16[2*int(s)*row:][:2*row], v[t*row:][:row])
			continue
		}
		copy(kv.K[int(s)*row:][:row], k[t*row:][:row])
		copy(kv.V[int(s)*row:][:row], v[t*row:][:row])
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
// blockTable maps the sequence's logical blocks to physical blocks of kv; token t, at
// absolute position positions[t], attends to the cached positions 0..positions[t], which
// must already be written (WriteKV the chunk's own K/V first). Softmax is taken of
// scale * q·k.
//
// It runs FlashAttention-style: K/V are read block by block with an online softmax, so
// memory stays O(tokens x heads x HeadDim) whatever the context length. Work is split over
// (token tile, kv head) units; a decode step with few kv heads also splits its context into
// chunks whose partial softmax states are merged at the end (flash-decoding).
func Attention(p *Pool, out, q []float32, nTokens, heads int, kv *KVCacheLayer, blockTable []int32, positions []int32, scale float32) error {
	if err := kv.check(); err != nil {
		return err
	}
	if heads <= 0 || heads%kv.KVHeads != 0 {
		return fmt.Errorf("cpu: attention: %d heads is not a multiple of %d kv heads", heads, kv.KVHeads)
	}
	maxPos, err := checkAttention(out, q, nTokens, heads, kv, blockTable, positions)
	if err != nil {
		return err
	}
	if nTokens == 0 {
		return nil
	}
	a := attnJob{k: p.kern, out: out, q: q, nTokens: nTokens, heads: heads, kv: kv,
		blockTable: blockTable, positions: positions, scale: scale}
	a.run(p, maxPos, attnSplitMinPositions)
	return nil
}

// checkAttention validates the arguments of one sequence's attention (kv already checked)
// and returns the largest query position.
func checkAttention(out, q []float32, nTokens, heads int, kv *KVCacheLayer, blockTable []int32, positions []int32) (int, error) {
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
	if len(positions) < nTokens {
		return 0, fmt.Errorf("cpu: attention: %d positions for %d tokens", len(positions), nTokens)
	}
	nBlocks := kv.NumBlocks()
	for t, pos := range positions[:nTokens] {
		if pos < 0 || int(pos)/kv.BlockSize >= len(blockTable) {
			return 0, fmt.Errorf("cpu: attention: token %d: position %d outside the block table (%d blocks of %d)", t, pos, len(blockTable), kv.BlockSize)
		}
	}
	maxPos := int(positions[0])
	for _, pos := range positions[:nTokens] {
		maxPos = max(maxPos, int(pos))
	}
	for i, b := range blockTable[:maxPos/kv.BlockSize+1] {
		if b < 0 || int(b) >= nBlocks {
			return 0, fmt.Errorf("cpu: attention: block table entry %d: block %d outside the cache's %d blocks", i, b, nBlocks)
		}
	}
	return maxPos, nil
}

// attnSplitMinPositions is the least context a split-K chunk of a decode attention covers.
const attnSplitMinPositions = 128

// attnPrefetchBlocks is how many cache blocks ahead of the one being read partial asks for:
// a decode step finds its layer's keys and values out of cache (the weights of the whole
// model went through since), and their rows are too short and far apart for the hardware
// prefetchers.
const attnPrefetchBlocks = 10

// attnJob is one Attention call's arguments.
type attnJob struct {
	k                     *kernels
	out, q                []float32
	nTokens, heads        int
	kv                    *KVCacheLayer
	blockTable, positions []int32
	scale                 float32
}

// run computes the attention over (token tile, kv head) units. When one tile holds all
// tokens (decode) and the kv heads alone would give the threads fewer than 4 units each,
// the context is also split into chunks of at least minSplit positions (flash-decoding):
// each chunk leaves its partial max, sum and weighted values, merged afterwards.
func (a *attnJob) run(p *Pool, maxPos, minSplit int) {
	kv := a.kv
	group := a.heads / kv.KVHeads
	tiles := (a.nTokens + attnTileTokens - 1) / attnTileTokens
	units := tiles * kv.KVHeads
	ctxBlocks := maxPos/kv.BlockSize + 1
	nSplit := 1
	if tiles == 1 && p.Threads() > 1 {
		want := (4*p.Threads() + units - 1) / units
		nSplit = max(1, min(want, (maxPos+1)/max(1, minSplit), ctxBlocks))
	}
	if nSplit == 1 && tiles == 1 && group > 1 && units < 4*p.Threads() {
		// A decode step with few kv heads: one unit per query head balances the threads
		// better; every head's arithmetic is the same as in a unit of its whole group.
		p.Run(kv.KVHeads*group, func(start, end int) {
			st := p.attnStates.get(a.nTokens*group, kv.HeadDim, kv.BlockSize)
			for u := start; u < end; u++ {
				kvh, g := u/group, u%group
				a.partial(st, 0, kvh, g, g+1, 0, ctxBlocks)
				a.finish(st, 0, kvh, g, g+1)
			}
			p.attnStates.put(st)
		})
		return
	}
	if nSplit == 1 {
		p.Run(units, func(start, end int) {
			st := p.attnStates.get(attnTileTokens*group, kv.HeadDim, kv.BlockSize)
			for u := start; u < end; u++ {
				tile, kvh := u/kv.KVHeads, u%kv.KVHeads
				a.partial(st, tile, kvh, 0, group, 0, ctxBlocks)
				a.finish(st, tile, kvh, 0, group)
			}
			p.attnStates.put(st)
		})
		return
	}

	per := (ctxBlocks + nSplit - 1) / nSplit // cache blocks per chunk
	nSplit = (ctxBlocks + per - 1) / per
	rows := a.nTokens * group
	hd := kv.HeadDim
	slot := rows * (hd + 2) // one chunk's m, l and acc
	p.attnMu.Lock()
	defer p.attnMu.Unlock()
	if n := kv.KVHeads * nSplit * slot; cap(p.attnScratch) < n {
		p.attnScratch = make([]float32, n)
	}
	part := p.attnScratch[:kv.KVHeads*nSplit*slot]
	p.Run(kv.KVHeads*nSplit, func(start, end int) {
		st := p.attnStates.get(rows, hd, kv.BlockSize)
		defer p.attnStates.put(st)
		for u := start; u < end; u++ {
			kvh, s := u/nSplit, u%nSplit
			a.partial(st, 0, kvh, 0, group, s*per, min((s+1)*per, ctxBlocks))
			dst := part[u*slot : (u+1)*slot]
			copy(dst, st.m[:rows])
			copy(dst[rows:], st.l[:rows])
			copy(dst[2*rows:], st.acc[:rows*hd])
		}
	})
	negInf := float32(math.Inf(-1))
	for kvh := range kv.KVHeads {
		chunks := part[kvh*nSplit*slot : (kvh+1)*nSplit*slot]
		for r := range rows {
			m := negInf
			for s := range nSplit {
				m = max(m, chunks[s*slot+r])
			}
			t, g := r/group, r%group
			o := a.out[(t*a.heads+kvh*group+g)*hd:][:hd]
			clear(o)
			var l float32
			for s := range nSplit {
				c := chunks[s*slot:]
				if c[r] == negInf {
					continue // the chunk lies beyond this token's position
				}
				f := float32(math.Exp(float64(c[r] - m)))
				l += f * c[rows+r]
				a.k.axpy(o, f, c[2*rows+r*hd:][:hd])
			}
			inv := 1 / l
			for i := range o {
				o[i] *= inv
			}
		}
	}
}

// attnState is a work unit's online-softmax state, one row per (token, query head).
type attnState struct {
	m, l   []float32 // running max and sum of exponentials
	acc    []float32 // running weighted sum of values, [rows][HeadDim]
	scores []float32 // one block's scores
}

// partial runs the online softmax of query heads g0..g1-1 of the group of kv head kvh for
// the tokens of tile over the logical cache blocks [lb0, lb1), leaving the running max, sum
// and weighted values in st (row (t-t0)*group+g for token t and head g). While one block
// is processed, the keys and values attnPrefetchBlocks blocks further are prefetched.
func (a *attnJob) partial(st *attnState, tile, kvh, g0, g1, lb0, lb1 int) {
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
		maxPos = max(maxPos, int(a.positions[t]))
	}
	end := min(lb1, maxPos/kv.BlockSize+1) // the blocks any token of the tile sees
	for lb := lb0; lb < min(end, lb0+attnPrefetchBlocks); lb++ {
		a.prefetchBlock(lb, kvh, maxPos)
	}
	for lb := lb0; lb < end; lb++ {
		if ahead := lb + attnPrefetchBlocks; ahead < end {
			a.prefetchBlock(ahead, kvh, maxPos)
		}
		base := int(a.blockTable[lb]) * kv.BlockSize
		for t := t0; t < t1; t++ {
			// Positions of this block that token t sees.
			n := min(kv.BlockSize, int(a.positions[t])-lb*kv.BlockSize+1)
			if n <= 0 {
				continue
			}
			for g := g0; g < g1; g++ {
				h := kvh*group + g
				r := (t-t0)*group + g
				qv := a.q[(t*a.heads+h)*hd:][:hd]
				sc := st.scores[:n]
				a.scores(sc, qv, base, kvh)
				bmax := scaleMax(sc, a.scale)
				acc := st.acc[r*hd : (r+1)*hd]
				if bmax > st.m[r] {
					c := float32(math.Exp(float64(st.m[r] - bmax)))
					st.l[r] *= c
					for i := range acc {
						acc[i] *= c
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
				a.wsum(acc, sc, base, kvh)
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

// scores sets sc[j] to q · the key of kv head kvh at position j of the block whose first
// slot is base.
func (a *attnJob) scores(sc, q []float32, base, kvh int) {
	off, stride := a.vectors(base, kvh)
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
	off := (int(a.blockTable[lb])*kv.BlockSize*kv.KVHeads + kvh) * kv.HeadDim
	stride := kv.KVHeads * kv.HeadDim
	if kv.DType == quant.F16 {
		a.k.prefetchRows(kv.K16[2*off:], 2*stride, n, 2*kv.HeadDim)
		a.k.prefetchRows(kv.V16[2*off:], 2*stride, n, 2*kv.HeadDim)
		return
	}
	a.k.prefetchRows(f32Bytes(kv.K[off:]), 4*stride, n, 4*kv.HeadDim)
	a.k.prefetchRows(f32Bytes(kv.V[off:]), 4*stride, n, 4*kv.HeadDim)
}

// finish writes the outputs of query heads g0..g1-1 of a partial run over the whole
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
			inv := 1 / st.l[r]
			o := a.out[(t*a.heads+h)*hd:][:hd]
			for i, v := range st.acc[r*hd : (r+1)*hd] {
				o[i] = v * inv
			}
		}
	}
}
