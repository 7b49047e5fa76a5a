package engine

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// TestGreedyOnly: a step samples on the device only when every sequence that samples
// takes the plain argmax of unprocessed logits.
func TestGreedyOnly(t *testing.T) {
	seq := func(p SamplingParams, mod func(*sequence)) scheduled {
		s := &sequence{req: &request{params: p}}
		if mod != nil {
			mod(s)
		}
		return scheduled{seq: s, numNew: 1, logits: true}
	}
	greedy := SamplingParams{Temperature: 0}
	tests := []struct {
		name string
		seqs []scheduled
		want bool
	}{
		{"all greedy", []scheduled{seq(greedy, nil), seq(greedy, nil)}, true},
		{"temperature", []scheduled{seq(greedy, nil), seq(SamplingParams{Temperature: 0.7}, nil)}, false},
		{"logprobs", []scheduled{seq(SamplingParams{Logprobs: true}, nil)}, false},
		{"top logprobs", []scheduled{seq(SamplingParams{TopLogprobs: 2}, nil)}, false},
		{"logit bias", []scheduled{seq(SamplingParams{LogitBias: map[int32]float32{3: 1}}, nil)}, false},
		{"penalties", []scheduled{seq(greedy, func(s *sequence) { s.penalties = &sample.Penalties{} })}, false},
		{"min tokens", []scheduled{seq(greedy, func(s *sequence) { s.suppress = &sample.Suppress{} })}, false},
		{"fork", []scheduled{seq(greedy, func(s *sequence) { s.forkPending = true })}, false},
		{"sampling seq without logits", []scheduled{seq(greedy, nil),
			{seq: &sequence{req: &request{params: SamplingParams{Temperature: 1}}}, numNew: 4}}, true},
	}
	for _, tc := range tests {
		if got := greedyOnly(&stepPlan{seqs: tc.seqs}); got != tc.want {
			t.Errorf("%s: greedyOnly = %v, want %v", tc.name, got, tc.want)
		}
	}
}
