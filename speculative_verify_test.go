package kvasir

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// TestSpeculativeDraftModelLongVerify: with the trained pair (F16) and a fixed draft length
// of 3 or 7, every verify step of 4 or 8 tokens runs the few-token matrix-vector kernels
// (in the avx512 set, each weight read once for all the step's tokens) and must give each
// token the logits of a decode step bit for bit: greedy output with speculation equals
// greedy output without, for three prompts generated at once.
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
		// All three submitted before any is read, so that their steps batch.
		var chans []<-chan Output
		for _, p := range prompts {
			ch, err := e.Generate(context.Background(), req(p))
			if err != nil {
				t.Fatal(err)
			}
			chans = append(chans, ch)
		}
		got := make([][]int32, len(prompts))
		for i, ch := range chans {
			for o := range ch {
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				got[i] = append(got[i], o.TokenIDs...)
			}
		}
		e.Close()
		for i := range prompts {
			if !slices.Equal(got[i], refs[i]) {
				t.Errorf("K = %d, prompt %q: with the draft %v, without %v", k, prompts[i], got[i], refs[i])
			}
		}
	}
}
