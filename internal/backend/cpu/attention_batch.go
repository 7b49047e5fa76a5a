package cpu

import "fmt"

// AttentionSeq is one sequence of an AttentionBatch call: its NTokens query tokens Q, their
// outputs Out (both [NTokens][heads][HeadDim]), its block table and the tokens' indices in
// the sequence's context, as Attention takes them.
type AttentionSeq struct {
	Out, Q       []float32
	NTokens      int
	BlockTable   []int32
	ContextIndex []int32
}

// attnBatchMinUnits is the least number of (sequence, token tile, kv head) units per thread
// for which AttentionBatch runs all sequences in one parallel loop; below it (a lone long
// decode, say) each sequence runs through Attention, which can split its context.
const attnBatchMinUnits = 2

// AttentionBatch computes Attention for every sequence of seqs over the same cache layer.
// Instead of one parallel loop per sequence it runs a single loop over the (sequence, token
// tile, kv head) units of all of them, so that a decode step of many short sequences pays
// for one dispatch per layer rather than one per sequence. Results equal Attention's bit
// for bit (see Attention on chunks); when there are too few units to keep the threads
// busy it falls back to Attention per sequence. A sequence's error is returned with its
// index.
func AttentionBatch(p *Pool, seqs []AttentionSeq, heads int, kv *KVCacheLayer, scale float32) error {
	return AttentionBatchWith(p, seqs, heads, kv, AttnOptions{Scale: scale})
}

// AttentionBatchWith is AttentionBatch with options (see AttentionWith).
func AttentionBatchWith(p *Pool, seqs []AttentionSeq, heads int, kv *KVCacheLayer, opt AttnOptions) error {
	if err := kv.check(); err != nil {
		return err
	}
	if heads <= 0 || heads%kv.KVHeads != 0 {
		return fmt.Errorf("cpu: attention: %d heads is not a multiple of %d kv heads", heads, kv.KVHeads)
	}
	// unitEnd[i] is the end of sequence i's units in the flat unit numbering.
	unitEnd := make([]int, len(seqs))
	ctxBlocks := make([]int, len(seqs))
	units := 0
	for i, s := range seqs {
		maxPos, err := checkAttention(s.Out, s.Q, s.NTokens, heads, kv, s.BlockTable, s.ContextIndex)
		if err != nil {
			return fmt.Errorf("sequence %d: %w", i, err)
		}
		ctxBlocks[i] = maxPos/kv.BlockSize + 1
		units += (s.NTokens + attnTileTokens - 1) / attnTileTokens * kv.KVHeads
		unitEnd[i] = units
	}
	if len(seqs) == 1 || units < attnBatchMinUnits*p.Threads() {
		for i, s := range seqs {
			if err := AttentionWith(p, s.Out, s.Q, s.NTokens, heads, kv, s.BlockTable, s.ContextIndex, opt); err != nil {
				return fmt.Errorf("sequence %d: %w", i, err)
			}
		}
		return nil
	}
	group := heads / kv.KVHeads
	p.Run(units, func(start, end int) {
		st := p.attnStates.get(attnTileTokens*group, kv.HeadDim, kv.BlockSize)
		defer p.attnStates.put(st)
		seq := 0
		for u := start; u < end; u++ {
			for u >= unitEnd[seq] {
				seq++
			}
			s := seqs[seq]
			local := u
			if seq > 0 {
				local -= unitEnd[seq-1]
			}
			a := attnJob{k: p.kern, out: s.Out, q: s.Q, nTokens: s.NTokens, heads: heads, kv: kv,
				blockTable: s.BlockTable, ctxIndex: s.ContextIndex, scale: opt.Scale, window: opt.Window,
				softcap: opt.Softcap, chunk: attnChunkPositions}
			tile, kvh := local/kv.KVHeads, local%kv.KVHeads
			a.whole(st, tile, kvh, 0, group, ctxBlocks[seq])
			a.finish(st, tile, kvh, 0, group)
		}
	})
	return nil
}
