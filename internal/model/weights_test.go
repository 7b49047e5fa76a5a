package model

import (
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
)

// countingSource has no tensors and counts the lookups made in it.
type countingSource struct{ lookups int }

func (s *countingSource) Tensor(string) (*format.Tensor, bool) {
	s.lookups++
	return nil, false
}

// TestBindStopsAtFirstMissing: binding ends at the first missing tensor instead of looking
// up every tensor of every declared layer.
func TestBindStopsAtFirstMissing(t *testing.T) {
	c := format.Config{Arch: "llama", VocabSize: 8, Dim: 8, Layers: 1000, Heads: 2, KVHeads: 2, HeadDim: 4,
		RopeDim: 4, FFNDim: 8, Experts: 4, ExpertsUsed: 2, ExpertFFNDim: 8}
	src := &countingSource{}
	_, err := bindWeights(src, c, "m", stageParts{}, fileTensor)
	if err == nil || !strings.Contains(err.Error(), `tensor "blk.0.attn_norm.weight" is missing`) {
		t.Fatalf("error %v, want the first layer tensor missing", err)
	}
	// rope_freqs.weight, the first layer tensor, and the stacked-experts probe of layer 0.
	if src.lookups > 3 {
		t.Errorf("%d lookups for a model of 1000 layers with no tensors, want at most 3", src.lookups)
	}
}
