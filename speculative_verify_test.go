package kvasir

import (
	"fmt"
	"slices"
	"testing"
)

// TestSpeculativeDraftModelLongVerify: with the trained pair (F16) and a fixed draft length
// of 3 or 7, every verify step of 4 or 8 tokens runs the few-token matrix-vector kernels
// (in the avx512 set, each weight read once for all the step's tokens) and must give each
// token the logits of a decode step bit for bit: greedy output with speculation equals
// greedy output without, for each of three prompts. They run one at a time: a step of
// several sequences' verifications can pass the GEMM crossover (gemmMinTokens), whose sums
// are not those of a one-token product.
func TestSpeculativeDraftModelLongVerify(t *testing.T) {
	target, draft := trainedPair(t)
	opt := Options{Threads: 2, KVCacheMemory: 16 << 20}
	plain, err := Open(target, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	prompts := []string{"It was a dark and stormy night", "The king said to his son", "Once upon a time there"}
	req := func(p string) Request {
		return Request{Prompt: p, Params: SamplingParams{MaxTokens: 40, IgnoreEOS: true}}
	}
	var refs [][]int32
	for _, p := range prompts {
		_, ref := storyTokens(t, plain, req(p))
		refs = append(refs, ref)
	}
	for _, k := range []int{3, 7} {
		opt.Speculative = mustSpec(t, fmt.Sprintf(`{"model": %q, "num_speculative_tokens": %d, "dynamic": false}`, draft, k))
		e, err := Open(target, opt)
		if err != nil {
			t.Fatal(err)
		}
		got := make([][]int32, len(prompts))
		for i, p := range prompts {
			_, got[i] = storyTokens(t, e, req(p))
		}
		e.Close()
		for i := range prompts {
			if !slices.Equal(got[i], refs[i]) {
				t.Errorf("K = %d, prompt %q: with the draft %v, without %v", k, prompts[i], got[i], refs[i])
			}
		}
	}
}
