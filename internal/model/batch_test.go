package model

import (
	"math"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// seqRun is one sequence's prompt and the blocks it owns in a shared cache.
type seqRun struct {
	prompt []int32
	table  []int32
}

// batchFor builds the batch of the given sequences' tokens [from, to) each, asking for the
// logits of every token.
func batchFor(seqs []seqRun, from, to []int, blockSize int) *Batch {
	b := &Batch{}
	for i, s := range seqs {
		start := len(b.Tokens)
		for pos := from[i]; pos < to[i]; pos++ {
			b.Tokens = append(b.Tokens, s.prompt[pos])
			b.Positions = append(b.Positions, int32(pos))
			b.SlotMapping = append(b.SlotMapping, s.table[pos/blockSize]*int32(blockSize)+int32(pos%blockSize))
			b.LogitsIndices = append(b.LogitsIndices, len(b.Tokens)-1)
		}
		b.Seqs = append(b.Seqs, Seq{BlockTable: s.table, QueryStart: start, QueryLen: to[i] - from[i], ContextLen: to[i]})
	}
	return b
}

// maxAbsDiff returns max |a-b| relative to max |b|.
func maxAbsDiff(a, b []float32) float64 {
	var d, scale float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
		scale = max(scale, math.Abs(float64(b[i])))
	}
	return d / max(scale, 1e-30)
}

// invariantTol is the relative logit difference allowed between one sequence run in a
// batch and alone, or prefilled in chunks and whole. The model adds no cross-token terms,
// but the backend multiplies one token (matrix-vector) and many (GEMM) with different
// summation orders, so rounding may differ slightly.
const invariantTol = 1e-5

// batchModel returns a small synthesized model (Qwen2-like: GQA, biases, NeoX rope) for the
// batching tests.
func batchModel(t *testing.T, dt quant.Type) *Model {
	t.Helper()
	s, err := synth.Lookup("qwen2.5-0.5b")
	if err != nil {
		t.Fatal(err)
	}
	fm := writeTwin(t, smallConfig(s.Config), dt, synth.GGUF)
	m, err := New(fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// TestBatchInvariance: three sequences prefilled together in one batch, then decoded
// together, give the same logits as each run alone in a cache of its own.
func TestBatchInvariance(t *testing.T) {
	for _, dt := range []quant.Type{quant.F32, quant.Q8_0} {
		t.Run(dt.String(), func(t *testing.T) {
			m := batchModel(t, dt)
			const bs = 4
			seqs := []seqRun{
				{prompt: testTokens(9), table: []int32{7, 1, 4}},
				{prompt: testTokens(14)[3:], table: []int32{0, 9, 2}},
				{prompt: testTokens(6)[1:], table: []int32{5, 8, 3, 6}},
			}
			vocab := m.Config().VocabSize
			// Together: prefill all but the last token of each, then decode the last ones.
			kv, err := m.NewKVCache(10, bs)
			if err != nil {
				t.Fatal(err)
			}
			lens := []int{len(seqs[0].prompt), len(seqs[1].prompt), len(seqs[2].prompt)}
			pre := []int{lens[0] - 1, lens[1] - 1, lens[2] - 1}
			together, err := m.Forward(batchFor(seqs, []int{0, 0, 0}, pre, bs), kv)
			if err != nil {
				t.Fatal(err)
			}
			dec, err := m.Forward(batchFor(seqs, pre, lens, bs), kv)
			if err != nil {
				t.Fatal(err)
			}
			row := 0
			for i, s := range seqs {
				alone, err := m.NewKVCache(10, bs)
				if err != nil {
					t.Fatal(err)
				}
				one := []seqRun{s}
				a, err := m.Forward(batchFor(one, []int{0}, []int{pre[i]}, bs), alone)
				if err != nil {
					t.Fatal(err)
				}
				ad, err := m.Forward(batchFor(one, []int{pre[i]}, []int{lens[i]}, bs), alone)
				if err != nil {
					t.Fatal(err)
				}
				if d := maxAbsDiff(together[row*vocab:(row+pre[i])*vocab], a); d > invariantTol {
					t.Errorf("sequence %d: prefill logits in a batch differ from alone by %g (relative)", i, d)
				}
				if d := maxAbsDiff(dec[i*vocab:(i+1)*vocab], ad); d > invariantTol {
					t.Errorf("sequence %d: decode logits in a batch differ from alone by %g (relative)", i, d)
				}
				row += pre[i]
			}
		})
	}
}

// TestLongContextBatchInvariance: at contexts that span several of attention's fold chunks
// (where a lone decode splits its context across threads and a batched one does not), a
// sequence's decode logits are bit-identical alone and batched with another sequence.
// (Two sequences: from 3 tokens on F32 matmuls take the GEMM path, whose sums differ in
// rounding from the one-token path; the attention itself must not add a difference.)
func TestLongContextBatchInvariance(t *testing.T) {
	m := batchModel(t, quant.F32)
	const bs = 16
	long := testTokens(400)
	seqs := []seqRun{
		{prompt: long[:331], table: []int32{3, 9, 0, 12, 5, 14, 7, 1, 10, 2, 11, 4, 13, 6, 8, 15, 16, 17, 18, 19, 20}},
		{prompt: long[50:310], table: []int32{21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37}},
	}
	vocab := m.Config().VocabSize
	kv, err := m.NewKVCache(38, bs)
	if err != nil {
		t.Fatal(err)
	}
	lens := []int{len(seqs[0].prompt), len(seqs[1].prompt)}
	pre := []int{lens[0] - 1, lens[1] - 1}
	if _, err := m.Forward(batchFor(seqs, []int{0, 0}, pre, bs), kv); err != nil {
		t.Fatal(err)
	}
	together, err := m.Forward(batchFor(seqs, pre, lens, bs), kv)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		one := []seqRun{s}
		got, err := m.Forward(batchFor(one, []int{pre[i]}, []int{lens[i]}, bs), kv)
		if err != nil {
			t.Fatal(err)
		}
		want := together[i*vocab : (i+1)*vocab]
		for j := range got {
			if got[j] != want[j] {
				t.Fatalf("sequence %d (%d tokens): logit %d is %g alone, %g in the batch", i, lens[i], j, got[j], want[j])
			}
		}
	}
}

// TestChunkedPrefill: a prompt prefilled in chunks of 5 (each attending to the cached
// chunks before it) gives the same logits as one whole prefill.
func TestChunkedPrefill(t *testing.T) {
	m := batchModel(t, quant.F32)
	prompt := testTokens(23)
	whole, err := m.NewSession(32)
	if err != nil {
		t.Fatal(err)
	}
	want, err := whole.Prefill(prompt)
	if err != nil {
		t.Fatal(err)
	}
	chunked, err := m.NewSession(32)
	if err != nil {
		t.Fatal(err)
	}
	chunked.Chunk = 5
	got, err := chunked.Prefill(prompt)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(got, want); d > invariantTol {
		t.Errorf("chunked prefill logits differ from whole prefill by %g (relative)", d)
	}
	// And both continue the same way.
	a, err := whole.Step(5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := chunked.Step(5)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxAbsDiff(a, b); d > invariantTol {
		t.Errorf("decode after chunked prefill differs by %g (relative)", d)
	}
	if whole.Len() != 24 || chunked.Len() != 24 {
		t.Errorf("session lengths %d and %d, want 24", whole.Len(), chunked.Len())
	}
}

// TestForwardRejectsBadBatches: malformed batches are errors, not panics.
func TestForwardRejectsBadBatches(t *testing.T) {
	m := batchModel(t, quant.F32)
	kv, err := m.NewKVCache(2, 4)
	if err != nil {
		t.Fatal(err)
	}
	good := func() *Batch {
		return &Batch{Tokens: []int32{1, 2}, Positions: []int32{0, 1}, SlotMapping: []int32{0, 1},
			Seqs: []Seq{{BlockTable: []int32{0}, QueryLen: 2, ContextLen: 2}}, LogitsIndices: []int{1}}
	}
	if _, err := m.Forward(good(), kv); err != nil {
		t.Fatalf("good batch: %v", err)
	}
	cases := map[string]func(b *Batch){
		"token out of vocab":   func(b *Batch) { b.Tokens[0] = 100000 },
		"negative token":       func(b *Batch) { b.Tokens[1] = -1 },
		"slot beyond cache":    func(b *Batch) { b.SlotMapping[1] = 8 },
		"short positions":      func(b *Batch) { b.Positions = b.Positions[:1] },
		"block beyond cache":   func(b *Batch) { b.Seqs[0].BlockTable[0] = 2 },
		"context beyond table": func(b *Batch) { b.Seqs[0].ContextLen = 5 },
		"negative position":    func(b *Batch) { b.Positions[1] = -1 },
		"short context":        func(b *Batch) { b.Seqs[0].ContextLen = 1 },
		"seqs miss tokens":     func(b *Batch) { b.Seqs[0].QueryLen = 1 },
		"logits index":         func(b *Batch) { b.LogitsIndices[0] = 2 },
		"no sequences":         func(b *Batch) { b.Seqs = nil },
		"empty":                func(b *Batch) { *b = Batch{} },
		"overlapping seqs": func(b *Batch) {
			b.Seqs = append(b.Seqs, Seq{BlockTable: []int32{1}, QueryStart: 1, QueryLen: 1, ContextLen: 1})
		},
	}
	for name, mutate := range cases {
		b := good()
		mutate(b)
		if _, err := m.Forward(b, kv); err == nil {
			t.Errorf("%s: Forward accepted the batch", name)
		}
	}
	// A cache of another model's shape, and one on another backend.
	small := format.Config{Layers: 1, KVHeads: 1, HeadDim: 2}
	other := &Model{cfg: small, par: Parallel{1, 1}, ranks: []*shard{{cfg: small, be: m.ranks[0].be}}}
	if kv, err := other.NewKVCache(2, 4); err != nil {
		t.Fatal(err)
	} else if _, err := m.Forward(good(), kv); err == nil {
		t.Errorf("Forward accepted a cache of another shape")
	}
	elsewhere := batchModel(t, quant.F32)
	if kv, err := elsewhere.NewKVCache(2, 4); err != nil {
		t.Fatal(err)
	} else if _, err := m.Forward(good(), kv); err == nil {
		t.Errorf("Forward accepted a cache made on another backend")
	}
}
