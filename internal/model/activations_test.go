package model

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
)

// freeCounter counts the tensors a backend frees.
type freeCounter struct {
	backend.Backend
	frees int
}

func (f *freeCounter) Free(t backend.Tensor) error {
	f.frees++
	return f.Backend.Free(t)
}

// TestStepBuffersGrowByPowersOfTwo: steps that grow a row or a token at a time (speculative
// verification adds logits rows a few at a time) regrow the activations only when they pass
// a power of two, since every regrowth frees tensors and a device drops its captured step
// graphs on a free; the views always have the step's sizes.
func TestStepBuffersGrowByPowersOfTwo(t *testing.T) {
	be := &freeCounter{Backend: cpubackend.New(1)}
	sh := &shard{cfg: format.Config{Dim: 8, Heads: 2, KVHeads: 1, HeadDim: 4, FFNDim: 16}, be: be}
	var s stepBuffers
	grows := 0
	for step, c := range []struct{ tokens, rows int }{
		{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 7}, {8, 8}, {9, 9}, {40, 1}, {40, 12}, {33, 20}, {64, 64}, {65, 1}, {3, 3},
	} {
		before := be.frees
		a, err := s.forStep(sh, c.tokens, c.rows)
		if err != nil {
			t.Fatalf("step %d %+v: %v", step, c, err)
		}
		if be.frees != before {
			grows++
		}
		if got := a.x.Shape(); got[0] != c.tokens {
			t.Errorf("step %d %+v: residual view of %d rows", step, c, got[0])
		}
		if got := a.last.Shape(); got[0] != c.rows {
			t.Errorf("step %d %+v: logits view of %d rows", step, c, got[0])
		}
		if s.tokens < c.tokens || s.rows < c.rows || s.tokens&(s.tokens-1) != 0 || s.rows&(s.rows-1) != 0 {
			t.Errorf("step %d %+v: capacity %d tokens, %d rows", step, c, s.tokens, s.rows)
		}
	}
	// Tokens x rows capacity: 1x1, then regrowths to 2x2, 4x4, 8x8, 16x16 (at 9), 64x16 (at
	// 40), 64x32 (20 rows), 64x64 and 128x64 (at 65 tokens): 8 where one a step would be 13.
	if grows != 8 {
		t.Errorf("%d regrowths, want 8", grows)
	}
}
