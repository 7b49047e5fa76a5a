package model

import "github.com/kvasir-llm/kvasir/internal/backend"

// decodePad holds the model's copies of a padded decode step's per-token arrays, reused
// from step to step.
type decodePad struct {
	tokens, positions, slots []int32
}

// padDecode pads s.meta, when it is a decode step (one token per sequence, each one's
// logits wanted in order), to g's bucket with sequences of one token that write no keys
// and values (slot -1) and attend only to slot 0 of block 0. Their logits rows follow the
// real ones and are not read back.
func (s *shard) padDecode(g backend.StepGrapher) {
	meta := &s.meta
	n := meta.NumTokens()
	if n == 0 || meta.NumSeqs() != n || len(meta.LogitsIndices) != n {
		return
	}
	for i, li := range meta.LogitsIndices {
		if int(li) != i {
			return
		}
	}
	bucket := g.DecodeBucket(n)
	if bucket <= n {
		return
	}
	p := &s.pad
	p.tokens = append(append(p.tokens[:0], meta.Tokens...), make([]int32, bucket-n)...)
	p.positions = append(append(p.positions[:0], meta.Positions...), make([]int32, bucket-n)...)
	p.slots = append(p.slots[:0], meta.SlotMapping...)
	for range bucket - n {
		p.slots = append(p.slots, -1)
	}
	meta.Tokens, meta.Positions, meta.SlotMapping = p.tokens, p.positions, p.slots
	for i := n; i < bucket; i++ {
		meta.QueryStarts = append(meta.QueryStarts, int32(i+1))
		meta.ContextLens = append(meta.ContextLens, 1)
		meta.LogitsIndices = append(meta.LogitsIndices, int32(i))
	}
	meta.BlockTables = append(meta.BlockTables, make([]int32, (bucket-n)*meta.MaxBlocks)...)
}
