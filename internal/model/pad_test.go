package model

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// padBackend is a CPU backend that asks for decode steps padded to powers of two, as a
// graph-replaying backend does, and runs the step's ops eagerly.
type padBackend struct {
	*cpubackend.Backend
	steps, noOwner int
}

func (p *padBackend) DecodeBucket(n int) int {
	b := 1
	for b < n {
		b <<= 1
	}
	return b
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

// TestKVBytesPerToken: the cache is sized by the element the backend holds.
func TestKVBytesPerToken(t *testing.T) {
	cpu := cpubackend.New(1)
	defer cpu.Close()
	for _, tc := range []struct {
		be   backend.Backend
		dt   quant.Type
		want int
	}{{cpu, quant.F32, 4}, {cpu, quant.F16, 2}, {halfKV{cpu}, quant.F32, 2}} {
		if got := backend.KVBytesPerElement(tc.be, tc.dt); got != tc.want {
			t.Errorf("%T asked for %s: %d bytes per element, want %d", tc.be, tc.dt, got, tc.want)
		}
	}
	s, err := synth.Lookup("llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := KVBytesPerToken(s.Config, 2), int64(2*32*8*128*2); got != want {
		t.Errorf("llama-3.1-8b bf16: %d bytes per token, want %d", got, want)
	}
	if got, want := KVBytesPerToken(s.Config, 4), int64(2*32*8*128*4); got != want {
		t.Errorf("llama-3.1-8b f32: %d bytes per token, want %d", got, want)
	}
}
