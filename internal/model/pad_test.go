package model

import (
	"bytes"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// padBackend is a CPU backend that asks for steps of up to 17 tokens per sequence to be
// padded to a power of two of sequences of the step's longest, as a graph-replaying
// backend does, and runs the step's ops eagerly.
type padBackend struct {
	*cpubackend.Backend
	steps, noOwner int
}

func (p *padBackend) GraphShape(seqs, tokens, maxQuery int) (int, int, bool) {
	if maxQuery > 17 {
		return seqs, maxQuery, false
	}
	b := 1
	for b < seqs {
		b <<= 1
	}
	return b, maxQuery, true
}

func (p *padBackend) RunStep(st backend.Step, owner any, ops func() error) error {
	p.steps++
	if owner == nil {
		p.noOwner++
	}
	return ops()
}

// TestPaddedDecode: decode steps padded to the backend's bucket (3 sequences run as 4)
// give the logits of the unpadded steps, write nothing into the cache for the padding
// (a second step still agrees), and ForwardGreedy picks sample.Greedy's tokens.
func TestPaddedDecode(t *testing.T) {
	s, err := synth.Lookup("qwen2.5-0.5b")
	if err != nil {
		t.Fatal(err)
	}
	fm := writeTwin(t, smallConfig(s.Config), quant.F32, synth.GGUF)
	plain, err := New(fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Close)
	pb := &padBackend{Backend: cpubackend.New(2)}
	t.Cleanup(func() { pb.Close() })
	padded, err := New(fm, Options{Backends: []backend.Backend{pb}})
	if err != nil {
		t.Fatal(err)
	}
	const bs = 4
	seqs := []seqRun{
		{prompt: testTokens(9), table: []int32{7, 1, 4}},
		{prompt: testTokens(11)[2:], table: []int32{0, 9, 2}},
		{prompt: testTokens(8)[1:], table: []int32{5, 8, 3, 6}},
	}
	vocab := plain.Config().VocabSize
	var caches [2]*KVCache
	for i, m := range []*Model{plain, padded} {
		if caches[i], err = m.NewKVCache(10, bs); err != nil {
			t.Fatal(err)
		}
	}
	pre := []int{len(seqs[0].prompt) - 2, len(seqs[1].prompt) - 2, len(seqs[2].prompt) - 2}
	for step := range 3 {
		from, to := pre, pre
		if step > 0 {
			from = make([]int, 3)
			to = make([]int, 3)
			for i := range seqs {
				from[i], to[i] = pre[i]+step-1, pre[i]+step
			}
		} else {
			from = []int{0, 0, 0}
		}
		want, err := plain.Forward(batchFor(seqs, from, to, bs), caches[0])
		if err != nil {
			t.Fatal(err)
		}
		got, err := padded.Forward(batchFor(seqs, from, to, bs), caches[1])
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("step %d: %d logits, want %d", step, len(got), len(want))
		}
		if d := maxAbsDiff(got, want); d > invariantTol {
			t.Errorf("step %d: padded logits differ by %g (relative)", step, d)
		}
		if step == 0 {
			continue
		}
		// The greedy ids of the same decode step, run again: re-running a decode step
		// rewrites the same slots with the same values.
		ids, err := padded.ForwardGreedy(batchFor(seqs, from, to, bs), caches[1], nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range seqs {
			if w := sample.Greedy(want[i*vocab : (i+1)*vocab]); int(ids[i]) != w {
				t.Errorf("step %d: sequence %d: greedy id %d, want %d", step, i, ids[i], w)
			}
		}
	}
	if pb.steps != 5 || pb.noOwner != 0 {
		t.Errorf("RunStep ran %d steps (want 5), %d without an owner", pb.steps, pb.noOwner)
	}
	if padded.ranks[0].meta.NumSeqs() != 4 {
		t.Errorf("last decode step ran %d sequences, want the bucket of 4", padded.ranks[0].meta.NumSeqs())
	}
}

// halfKV is a backend whose KV cache holds 2-byte elements.
type halfKV struct{ backend.Backend }

func (halfKV) KVBytesPerElement() int { return 2 }

// TestKVBytesPerToken: the cache is sized by the head vectors the backend holds.
func TestKVBytesPerToken(t *testing.T) {
	cpu := cpubackend.New(1)
	defer cpu.Close()
	for _, tc := range []struct {
		be   backend.Backend
		dt   quant.Type
		want int
	}{{cpu, quant.F32, 4 * 64}, {cpu, quant.F16, 2 * 64}, {halfKV{cpu}, quant.F32, 2 * 64},
		{cpu, quant.KVInt8, 64 + 2*4}, {cpu, quant.KVFP8E4M3, 64 + 2*4}} {
		if got := backend.KVRowBytes(tc.be, tc.dt, 64); got != tc.want {
			t.Errorf("%T asked for %s: %d bytes per 64-element head vector, want %d", tc.be, tc.dt, got, tc.want)
		}
	}
	s, err := synth.Lookup("llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := KVBytesPerToken(s.Config, 2*128), int64(2*32*8*128*2); got != want {
		t.Errorf("llama-3.1-8b bf16: %d bytes per token, want %d", got, want)
	}
	if got, want := KVBytesPerToken(s.Config, 4*128), int64(2*32*8*128*4); got != want {
		t.Errorf("llama-3.1-8b f32: %d bytes per token, want %d", got, want)
	}
}

// TestPaddedVerify: steps of a few tokens per sequence, of different counts (verifying 4,
// 0 and 2 draft tokens), are padded to the backend's shape (4 sequences of 5 tokens) and,
// with Q8_0 weights (whose matmuls sum every row in one order for any number of rows),
// give the unpadded steps' logits bit for bit, whichever rows are asked for and in
// whatever order; the padding writes nothing into the cache (both caches hold the same
// bytes), and greedy ids follow the logits.
func TestPaddedVerify(t *testing.T) {
	s, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	fm := writeTwin(t, smallConfig(s.Config), quant.Q8_0, synth.GGUF)
	plain := mustModel(t, fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
	pb := &padBackend{Backend: cpubackend.New(2)}
	t.Cleanup(func() { pb.Close() })
	padded := mustModel(t, fm, Options{Backends: []backend.Backend{pb}})
	const bs = 4
	seqs := []seqRun{
		{prompt: testTokens(16), table: []int32{7, 1, 4, 10}},
		{prompt: testTokens(15)[2:], table: []int32{0, 9, 2, 11}},
		{prompt: testTokens(14)[1:], table: []int32{5, 8, 3, 6}},
	}
	var caches [2]*KVCache
	for i, m := range []*Model{plain, padded} {
		if caches[i], err = m.NewKVCache(12, bs); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Forward(batchFor(seqs, []int{0, 0, 0}, []int{6, 3, 7}, bs), caches[i]); err != nil {
			t.Fatal(err)
		}
	}
	vocab := plain.Config().VocabSize
	lastOnly := func(b *Batch) {
		b.LogitsIndices = b.LogitsIndices[:0]
		for _, sq := range b.Seqs {
			b.LogitsIndices = append(b.LogitsIndices, sq.QueryStart+sq.QueryLen-1)
		}
	}
	for _, tc := range []struct {
		name     string
		from, to []int
		rows     func(b *Batch)
	}{
		{"every token", []int{6, 3, 7}, []int{11, 4, 10}, nil},
		{"last tokens", []int{7, 4, 8}, []int{12, 5, 11}, lastOnly},
		{"some rows out of order", []int{8, 5, 9}, []int{13, 6, 12}, func(b *Batch) { b.LogitsIndices = []int{6, 0, 3, 5} }},
		{"uniform", []int{9, 6, 10}, []int{10, 7, 11}, nil},
	} {
		var logits [2][]float32
		for i, m := range []*Model{plain, padded} {
			b := batchFor(seqs, tc.from, tc.to, bs)
			if tc.rows != nil {
				tc.rows(b)
			}
			if logits[i], err = m.Forward(b, caches[i]); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		if !slices.Equal(logits[0], logits[1]) {
			t.Errorf("%s: padded logits differ by %g (relative)", tc.name, maxAbsDiff(logits[1], logits[0]))
		}
		meta, q := &padded.ranks[0].meta, 0
		for i := range tc.from {
			q = max(q, tc.to[i]-tc.from[i])
		}
		if meta.NumSeqs() != 4 || meta.NumTokens() != 4*q || len(meta.LogitsIndices) != 4*q {
			t.Errorf("%s: ran %d sequences, %d tokens, %d logits rows; want 4, %d, %d", tc.name, meta.NumSeqs(), meta.NumTokens(), len(meta.LogitsIndices), 4*q, 4*q)
		}
		for i := range tc.from {
			if got, want := int(meta.ContextLens[i]), tc.to[i]+q-(tc.to[i]-tc.from[i]); got != want {
				t.Errorf("%s: sequence %d: padded context %d, want %d", tc.name, i, got, want)
			}
		}
		b := batchFor(seqs, tc.from, tc.to, bs)
		if tc.rows != nil {
			tc.rows(b)
		}
		ids, err := padded.ForwardGreedy(b, caches[1], nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			if w := sample.Greedy(logits[0][i*vocab : (i+1)*vocab]); int(id) != w {
				t.Errorf("%s: row %d: greedy id %d, want %d", tc.name, i, id, w)
			}
		}
	}
	all := make([]int32, 12)
	for i := range all {
		all[i] = int32(i)
	}
	var contents [2][]byte
	for i, kv := range caches {
		contents[i] = make([]byte, len(all)*kv.BlockBytes())
		if err := kv.ReadBlocks(all, contents[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(contents[0], contents[1]) {
		t.Error("the padded steps' cache holds other keys and values than the unpadded steps'")
	}
}
