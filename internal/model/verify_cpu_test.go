package model

import (
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// TestVerifyStepsMatchDecode: on the CPU with float weights, a step of several sequences'
// verifications under the GEMM crossover (two sequences of 1+3 tokens with any kernel
// set; three of 1+4 and of 1+7, 15 and 24 tokens, with the avx512 set, whose crossover is
// 48 tokens) gives every token the logits, bit for bit, of decoding that token alone, one
// sequence and one token a step: greedy speculation in a batch keeps plain decoding's
// tokens.
func TestVerifyStepsMatchDecode(t *testing.T) {
	s, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	all := []seqRun{
		{prompt: testTokens(24), table: []int32{7, 1, 4, 10, 13, 16}},
		{prompt: testTokens(23)[1:], table: []int32{0, 9, 2, 11, 14, 17}},
		{prompt: testTokens(25)[3:], table: []int32{5, 8, 3, 6, 12, 15}},
	}
	cases := []struct{ seqs, k int }{{2, 3}}
	if cpu.KernelSets()[0] == "avx512" {
		cases = append(cases, struct{ seqs, k int }{3, 4}, struct{ seqs, k int }{3, 7})
	}
	for _, wt := range []quant.Type{quant.F16, quant.BF16, quant.F32} {
		fm := writeTwin(t, smallConfig(s.Config), wt, synth.GGUF)
		m := mustModel(t, fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
		const bs = 4
		for _, c := range cases {
			seqs, k := all[:c.seqs], c.k
			batched, err := m.NewKVCache(18, bs)
			if err != nil {
				t.Fatal(err)
			}
			alone, err := m.NewKVCache(18, bs)
			if err != nil {
				t.Fatal(err)
			}
			prompt := []int{9, 7, 8}[:len(seqs)]
			zero := make([]int, len(seqs))
			for _, kv := range []*KVCache{batched, alone} {
				if _, err := m.Forward(batchFor(seqs, zero, prompt, bs), kv); err != nil {
					t.Fatal(err)
				}
			}
			to := make([]int, len(seqs))
			for i := range to {
				to[i] = prompt[i] + 1 + k
			}
			got, err := m.Forward(batchFor(seqs, prompt, to, bs), batched)
			if err != nil {
				t.Fatal(err)
			}
			vocab := m.Config().VocabSize
			row := 0
			for i := range seqs {
				for pos := prompt[i]; pos < to[i]; pos++ {
					want, err := m.Forward(batchFor(seqs[i:i+1], []int{pos}, []int{pos + 1}, bs), alone)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got[row*vocab:(row+1)*vocab], want) {
						t.Fatalf("%s, %d x (1+%d) tokens: sequence %d position %d: logits differ from a decode step's by %g (relative)",
							wt, len(seqs), k, i, pos, maxAbsDiff(got[row*vocab:(row+1)*vocab], want))
					}
					row++
				}
			}
		}
	}
}
