package engine

import (
	"math/rand/v2"
	"testing"
)

// TestGreedyOnly: a step samples on the device only when every sequence that samples
// takes the plain argmax of unprocessed logits.
func TestGreedyOnly(t *testing.T) {
	e := &Engine{rng: rand.New(rand.NewPCG(1, 2))}
	seq := func(p SamplingParams, mod func(*sequence)) scheduled {
		s := e.newSequence(&request{params: p, policy: fullPolicy}, 0, nil, nil)
		if mod != nil {
			mod(s)
		}
		return scheduled{seq: s, numNew: 1, rows: []int{0}, sampling: true}
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
		{"penalties", []scheduled{seq(SamplingParams{RepetitionPenalty: 1.2}, nil)}, false},
		{"min tokens", []scheduled{seq(SamplingParams{MinTokens: 3, StopTokenIDs: []int32{2}}, nil)}, false},
		{"greedy ignores min-p", []scheduled{seq(SamplingParams{MinP: 0.1}, nil)}, true},
		{"fork", []scheduled{seq(greedy, func(s *sequence) { s.forkPending = true })}, false},
		{"sampling seq without logits", []scheduled{seq(greedy, nil),
			{seq: e.newSequence(&request{params: SamplingParams{Temperature: 1}, policy: fullPolicy}, 0, nil, nil), numNew: 4}}, true},
	}
	for _, tc := range tests {
		if got := greedyOnly(&stepPlan{seqs: tc.seqs}); got != tc.want {
			t.Errorf("%s: greedyOnly = %v, want %v", tc.name, got, tc.want)
		}
	}
}
