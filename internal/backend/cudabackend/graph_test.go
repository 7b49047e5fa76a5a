package cudabackend

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
)

// TestGraphShape: decode steps keep their power-of-two buckets up to 256 sequences; steps
// of up to 17 tokens per sequence are padded to a bucket of their longest, unless the
// padding would pass 512 tokens, double a step of more than 128, or take a step of at
// most 8 tokens (the GEMV kernels' rows) past 8.
func TestGraphShape(t *testing.T) {
	for _, c := range []struct {
		seqs, tokens, maxQuery int
		bucket, q              int
		ok                     bool
	}{
		{1, 1, 1, 1, 1, true},
		{3, 3, 1, 4, 1, true},
		{129, 129, 1, 256, 1, true},
		{256, 256, 1, 256, 1, true},
		{257, 257, 1, 257, 1, false},
		{1, 5, 5, 1, 5, true},     // verify 1+4 at batch 1
		{1, 17, 17, 1, 17, true},  // verify 1+16
		{1, 18, 18, 1, 18, false}, // a prefill chunk
		{2, 10, 5, 2, 5, true},
		{2, 6, 5, 2, 5, false},     // 6 tokens would become 10: out of the GEMV kernels' reach
		{3, 8, 2, 4, 2, true},      // 8 tokens padded to 8
		{8, 30, 5, 8, 5, true},     // 40 tokens for 30
		{32, 100, 5, 32, 5, true},  // 160 for 100
		{33, 99, 3, 64, 3, true},   // 192 for 99: within twice
		{33, 70, 5, 64, 5, false},  // 320 for 70: more than twice
		{64, 200, 9, 64, 9, false}, // 576 tokens
		{0, 0, 1, 0, 1, false},
	} {
		b, q, ok := graphShape(c.seqs, c.tokens, c.maxQuery)
		if ok != c.ok || (ok && (b != c.bucket || q != c.q)) {
			t.Errorf("graphShape(%d, %d, %d) = %d, %d, %v; want %d, %d, %v", c.seqs, c.tokens, c.maxQuery, b, q, ok, c.bucket, c.q, c.ok)
		}
	}
}

// uniformMeta returns the metadata of seqs sequences of q tokens each, every token a
// logits row.
func uniformMeta(seqs, q int) *backend.StepMeta {
	m := &backend.StepMeta{MaxBlocks: 1}
	for i := range seqs * q {
		m.Tokens = append(m.Tokens, 1)
		m.Positions = append(m.Positions, int32(i))
		m.SlotMapping = append(m.SlotMapping, int32(i))
		m.LogitsIndices = append(m.LogitsIndices, int32(i))
	}
	for i := range seqs {
		m.QueryStarts = append(m.QueryStarts, int32(i*q))
		m.ContextLens = append(m.ContextLens, int32(q))
		m.BlockTables = append(m.BlockTables, 0)
	}
	m.QueryStarts = append(m.QueryStarts, int32(seqs*q))
	return m
}

// TestGraphQuery: the backend replays the steps the model pads (graph shapes) and no
// other: uneven sequences, missing logits rows, a sequence count off its bucket, or more
// tokens than a graph takes run eagerly.
func TestGraphQuery(t *testing.T) {
	for _, c := range []struct {
		name   string
		meta   *backend.StepMeta
		edit   func(m *backend.StepMeta)
		q      int
		graphs bool
	}{
		{"decode of 4", uniformMeta(4, 1), nil, 1, true},
		{"decode of 3", uniformMeta(3, 1), nil, 0, false},
		{"verify 1+4 at batch 1", uniformMeta(1, 5), nil, 5, true},
		{"verify 1+4 at batch 8", uniformMeta(8, 5), nil, 5, true},
		{"verify 1+16 at batch 2", uniformMeta(2, 17), nil, 17, true},
		{"18 tokens a sequence", uniformMeta(1, 18), nil, 0, false},
		{"uneven sequences", uniformMeta(2, 5), func(m *backend.StepMeta) { m.QueryStarts[1] = 4 }, 0, false},
		{"last rows only", uniformMeta(2, 5), func(m *backend.StepMeta) { m.LogitsIndices = []int32{4, 9} }, 0, false},
		{"no logits", uniformMeta(4, 1), func(m *backend.StepMeta) { m.LogitsIndices = nil }, 0, false},
	} {
		if c.edit != nil {
			c.edit(c.meta)
		}
		q, ok := graphQuery(c.meta)
		if ok != c.graphs || (ok && q != c.q) {
			t.Errorf("%s: graphQuery = %d, %v; want %d, %v", c.name, q, ok, c.q, c.graphs)
		}
	}
}
