package bench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/kvasir-llm/kvasir/internal/model"
)

// VerifyResult is what one batch size of `bench generate --verify-len K` measures: the time
// of a speculative verify step (1+K tokens per sequence, every token's greedy id, as the
// engine verifies K draft tokens) against a decode step (one token per sequence), at the
// same contexts.
type VerifyResult struct {
	Batch        int     `json:"batch"`
	VerifyLen    int     `json:"verify_len"`
	DecodeStepMS float64 `json:"decode_step_ms"`
	VerifyStepMS float64 `json:"verify_step_ms"`
	Ratio        float64 `json:"verify_to_decode_ratio"`
}

// Verify times, for each batch size, steps of 1+k tokens per sequence against steps of one,
// steps of each, alternated, over sequences that first prefill random prompts of promptLen
// tokens (in chunks of model.DefaultPrefillChunk): the i-th step of either kind starts at
// position promptLen+i, so both see the same contexts (a verify step's later tokens are
// overwritten, as if no draft token were accepted). Every step picks its greedy ids on the
// backend, as the engine's greedy verification does. Each shape is run three times first,
// so that a graph-replaying backend has captured it.
func Verify(m *model.Model, promptLen, steps, k int, batches []int) ([]VerifyResult, error) {
	if promptLen <= 0 || steps <= 0 || k <= 0 {
		return nil, fmt.Errorf("verify: prompt %d, %d steps, %d draft tokens: need positive counts", promptLen, steps, k)
	}
	var out []VerifyResult
	for _, n := range batches {
		if n <= 0 {
			return nil, fmt.Errorf("verify: batch size %d", n)
		}
		r, err := verifyBatch(m, n, promptLen, steps, k)
		if err != nil {
			return nil, fmt.Errorf("verify at batch %d: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// verifySeqs are the sequences of one Verify measurement: their tokens and block tables in
// one cache.
type verifySeqs struct {
	tokens [][]int32
	tables [][]int32
}

// batch returns the step of q tokens per sequence from position p on, every token's
// logits row asked for.
func (v *verifySeqs) batch(p, q int) *model.Batch {
	const bs = model.DefaultBlockSize
	b := &model.Batch{}
	for i, toks := range v.tokens {
		start := len(b.Tokens)
		for j := p; j < p+q; j++ {
			b.Tokens = append(b.Tokens, toks[j])
			b.Positions = append(b.Positions, int32(j))
			b.SlotMapping = append(b.SlotMapping, v.tables[i][j/bs]*bs+int32(j%bs))
			b.LogitsIndices = append(b.LogitsIndices, len(b.Tokens)-1)
		}
		b.Seqs = append(b.Seqs, model.Seq{BlockTable: v.tables[i], QueryStart: start, QueryLen: q, ContextLen: p + q})
	}
	return b
}

// verifyBatch is Verify at one batch size.
func verifyBatch(m *model.Model, n, promptLen, steps, k int) (VerifyResult, error) {
	const bs = model.DefaultBlockSize
	res := VerifyResult{Batch: n, VerifyLen: k}
	maxLen := promptLen + steps + k + 1
	per := (maxLen + bs - 1) / bs
	kv, err := m.NewKVCache(n*per, bs)
	if err != nil {
		return res, err
	}
	rng := rand.New(rand.NewPCG(uint64(n), uint64(k)))
	vocab := m.Config().VocabSize
	seqs := &verifySeqs{}
	for i := range n {
		toks := make([]int32, maxLen)
		for j := range toks {
			toks[j] = int32(rng.IntN(vocab))
		}
		table := make([]int32, per)
		for j := range table {
			table[j] = int32(i*per + j)
		}
		seqs.tokens, seqs.tables = append(seqs.tokens, toks), append(seqs.tables, table)
	}
	// Prefill each sequence in chunks, no logits wanted.
	for i := range n {
		one := &verifySeqs{tokens: seqs.tokens[i : i+1], tables: seqs.tables[i : i+1]}
		for p := 0; p < promptLen; p += model.DefaultPrefillChunk {
			b := one.batch(p, min(model.DefaultPrefillChunk, promptLen-p))
			b.LogitsIndices = nil
			if _, err := m.Forward(b, kv); err != nil {
				return res, err
			}
		}
	}
	step := func(p, q int) (time.Duration, error) {
		t0 := time.Now()
		_, err := m.ForwardGreedy(seqs.batch(p, q), kv, nil)
		return time.Since(t0), err
	}
	for range 3 {
		for _, q := range []int{1, 1 + k} {
			if _, err := step(promptLen, q); err != nil {
				return res, err
			}
		}
	}
	// Alternated, so that a machine's speed swings reach both kinds alike.
	var decode, verify time.Duration
	for i := range steps {
		d, err := step(promptLen+i, 1)
		if err != nil {
			return res, err
		}
		v, err := step(promptLen+i, 1+k)
		if err != nil {
			return res, err
		}
		decode, verify = decode+d, verify+v
	}
	res.DecodeStepMS = decode.Seconds() * 1000 / float64(steps)
	res.VerifyStepMS = verify.Seconds() * 1000 / float64(steps)
	if res.DecodeStepMS > 0 {
		res.Ratio = res.VerifyStepMS / res.DecodeStepMS
	}
	return res, nil
}

// WriteVerify prints Verify's figures as `kvasir bench generate --verify-len` does.
func WriteVerify(w io.Writer, rs []VerifyResult) {
	for _, r := range rs {
		fmt.Fprintf(w, "verify:  batch %d: 1+%d-token step %.3f ms, 1-token step %.3f ms = %.2fx\n",
			r.Batch, r.VerifyLen, r.VerifyStepMS, r.DecodeStepMS, r.Ratio)
	}
}
