package model

import "github.com/kvasir-llm/kvasir/internal/backend"

// stepPad holds the model's copies of a padded step's arrays, reused from step to step:
// the per-token arrays, and the per-sequence and logits arrays, which trade places with
// the step metadata's own each time a step is padded (the metadata's are read while these
// are written).
type stepPad struct {
	tokens, positions, slots []int32
	index                    []int32 // each real token's place in the padded step
	starts, ctxs, tables     []int32
	logits                   []int32
	lora                     []int32 // the tokens' adapter slots (StepMeta.LoRASlots)
}

// padStep lays s.meta out in the shape g replays as a graph, when g replays steps like it
// (backend.StepGrapher.GraphShape), for a cache of blockSize-token blocks: bucket
// sequences of q tokens each. A sequence of fewer than q tokens is followed by padding
// tokens (token 0 at position 0, slot -1: no keys and values written) and its context
// grows by as many, so its own tokens keep their context indices; the padding tokens
// attend to whatever those later indices of its blocks (block 0 past its table) hold,
// which only they read. Padding sequences of q padding tokens with a context of q, all in
// block 0, fill the bucket. The step takes a logits row for every one of its tokens: the
// rows asked for first, in their order and moved to their tokens' new places, then the
// remaining tokens' rows, which are not read back. Padding tokens take no adapter (LoRA
// slot -1). A step without logits rows is left as it is (its ops differ from a step with
// them).
func (s *shard) padStep(g backend.StepGrapher, blockSize int) {
	meta := &s.meta
	n, seqs, rows := meta.NumTokens(), meta.NumSeqs(), len(meta.LogitsIndices)
	if n == 0 || rows == 0 {
		return
	}
	bucket, q, ok := g.GraphShape(seqs, n, meta.MaxQueryLen)
	if !ok || bucket < seqs || q < meta.MaxQueryLen || rows > bucket*q {
		return
	}
	if bucket == seqs && n == seqs*q && rows == n {
		return // every sequence has q tokens and every token its logits row already
	}
	p := &s.pad
	p.tokens, p.positions, p.slots, p.index = p.tokens[:0], p.positions[:0], p.slots[:0], p.index[:0]
	p.starts, p.ctxs, p.logits, p.lora = p.starts[:0], p.ctxs[:0], p.logits[:0], p.lora[:0]
	withLoRA := meta.LoRASlots != nil
	stride, maxCtx := 0, 0
	for i := range bucket {
		ctx := q
		if i < seqs {
			from, to := meta.QueryStarts[i], meta.QueryStarts[i+1]
			for t := from; t < to; t++ {
				p.index = append(p.index, int32(len(p.tokens)))
				p.tokens = append(p.tokens, meta.Tokens[t])
				p.positions = append(p.positions, meta.Positions[t])
				p.slots = append(p.slots, meta.SlotMapping[t])
				if withLoRA {
					p.lora = append(p.lora, meta.LoRASlots[t])
				}
			}
			ctx = int(meta.ContextLens[i]) + q - int(to-from)
		}
		for len(p.tokens) < (i+1)*q {
			p.tokens, p.positions, p.slots = append(p.tokens, 0), append(p.positions, 0), append(p.slots, -1)
			if withLoRA {
				p.lora = append(p.lora, -1)
			}
		}
		p.starts = append(p.starts, int32(i*q))
		p.ctxs = append(p.ctxs, int32(ctx))
		stride = max(stride, (ctx+blockSize-1)/blockSize)
		maxCtx = max(maxCtx, ctx)
	}
	p.starts = append(p.starts, int32(bucket*q))
	if cap(p.tables) < bucket*stride {
		p.tables = make([]int32, bucket*stride)
	}
	p.tables = p.tables[:bucket*stride]
	clear(p.tables)
	for i := range seqs {
		copy(p.tables[i*stride:], meta.BlockTables[i*meta.MaxBlocks:(i+1)*meta.MaxBlocks])
	}
	for _, li := range meta.LogitsIndices {
		p.logits = append(p.logits, p.index[li])
	}
	for r := rows; r < bucket*q; r++ {
		p.logits = append(p.logits, int32(r))
	}
	meta.Tokens, meta.Positions, meta.SlotMapping = p.tokens, p.positions, p.slots
	meta.QueryStarts, p.starts = p.starts, meta.QueryStarts
	meta.ContextLens, p.ctxs = p.ctxs, meta.ContextLens
	meta.BlockTables, p.tables = p.tables, meta.BlockTables
	meta.LogitsIndices, p.logits = p.logits, meta.LogitsIndices
	if withLoRA {
		meta.LoRASlots, p.lora = p.lora, meta.LoRASlots
	}
	meta.MaxBlocks, meta.MaxQueryLen, meta.MaxContextLen = stride, q, maxCtx
}
