package model

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// layouts are the splits the parallel tests run against the whole model.
var layouts = []Parallel{{Tensor: 2, Pipeline: 1}, {Tensor: 4, Pipeline: 1}, {Tensor: 1, Pipeline: 2}, {Tensor: 2, Pipeline: 2}}

// generate prefills prompt in chunks of 5 tokens and decodes n greedy tokens with a
// Session, returning the tokens and the logits that chose each.
func generate(t *testing.T, m *Model, prompt []int32, n int) ([]int32, [][]float32) {
	t.Helper()
	s, err := m.NewSession(64)
	if err != nil {
		t.Fatal(err)
	}
	s.Chunk = 5
	logits, err := s.Prefill(prompt)
	if err != nil {
		t.Fatal(err)
	}
	var toks []int32
	var all [][]float32
	for range n {
		all = append(all, logits)
		tok := int32(sample.Greedy(logits))
		toks = append(toks, tok)
		if logits, err = s.Step(tok); err != nil {
			t.Fatal(err)
		}
	}
	return toks, all
}

// TestParallelMatchesWhole: split by tensor (2 and 4 ranks), by pipeline (2 stages) and
// both, every shape that splits gives the greedy tokens of the whole model, with logits
// equal up to the summation order of the all-reduce.
func TestParallelMatchesWhole(t *testing.T) {
	prompt := testTokens(13)
	for name, c := range ggufShapes(t) {
		for _, dt := range []quant.Type{quant.F32, quant.Q8_0} {
			fm := writeTwin(t, c, dt, synth.GGUF)
			whole, err := New(fm, Options{Backends: cpuBackends(t, 1, Parallel{})})
			if err != nil {
				t.Fatal(err)
			}
			want, wantLogits := generate(t, whole, prompt, 12)
			whole.Close()
			for _, p := range layouts {
				t.Run(fmt.Sprintf("%s/%s/tp%d-pp%d", name, dt, p.Tensor, p.Pipeline), func(t *testing.T) {
					if err := p.Check(c); err != nil {
						if name != "smollm2-135m" { // 3 heads: splits by pipeline only
							t.Fatalf("shape does not split: %v", err)
						}
						if p.Tensor == 1 {
							t.Fatalf("a pipeline split was refused: %v", err)
						}
						return
					}
					m, err := New(fm, Options{Backends: cpuBackends(t, 2, p), Parallel: p})
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					got, gotLogits := generate(t, m, prompt, 12)
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("greedy tokens %v, whole model %v", got, want)
					}
					// The all-reduce adds the ranks' terms in another order than one matrix
					// product does: float32 rounding apart, logits are equal. With quantized
					// weights the activations are rounded to 8 bits, and a last-bit
					// difference that moves a value across a rounding step changes it by
					// 1/127 of its block's scale, so their logits get the quantized type's
					// tolerance against the reference path.
					tol := max(1e-5, dtypeTolerance[dt]/5)
					if e := relErr(gotLogits, wantLogits); e > tol {
						t.Errorf("logits differ from the whole model's by %.3g (relative), allowed %.g", e, tol)
					}
				})
			}
		}
	}
}

// TestPipelineMicroBatches: a step of three sequences on two stages runs as two
// micro-batches and returns the logits the whole model returns for the same step.
func TestPipelineMicroBatches(t *testing.T) {
	s, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	fm := writeTwin(t, smallConfig(s.Config), quant.F32, synth.GGUF)
	seqs := []seqRun{
		{prompt: testTokens(9), table: []int32{3, 0}},
		{prompt: testTokens(4), table: []int32{1}},
		{prompt: testTokens(6), table: []int32{4, 2}},
	}
	run := func(p Parallel) [][]float32 {
		m, err := New(fm, Options{Backends: cpuBackends(t, 2, p), Parallel: p})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		kv, err := m.NewKVCache(5, 8)
		if err != nil {
			t.Fatal(err)
		}
		// A prefill step of all three sequences, then a step of the first one's last
		// two prompt tokens.
		steps := []*Batch{batchFor(seqs, []int{0, 0, 0}, []int{7, 4, 6}, 8), batchFor(seqs[:1], []int{7}, []int{9}, 8)}
		var out [][]float32
		for _, b := range steps {
			if p.Pipeline > 1 && len(b.Seqs) > 1 && len(m.microBatches(b)) != 2 {
				t.Fatalf("%d sequences ran as %d micro-batches, want 2", len(b.Seqs), len(m.microBatches(b)))
			}
			l, err := m.Forward(b, kv)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return out
	}
	want := run(Parallel{})
	for _, p := range []Parallel{{Tensor: 1, Pipeline: 2}, {Tensor: 2, Pipeline: 2}} {
		if e := relErr(run(p), want); e > 1e-5 {
			t.Errorf("tp%d-pp%d: logits differ from the whole model's by %.3g (relative)", p.Tensor, p.Pipeline, e)
		}
	}
}

// TestMicroBatchSplit checks the cut: sequences stay whole and in order, tokens and logits
// rows are renumbered from each micro-batch's start, and a batch whose logits rows are out
// of order is not split.
func TestMicroBatchSplit(t *testing.T) {
	m := &Model{par: Parallel{Tensor: 1, Pipeline: 2}}
	b := &Batch{
		Tokens: make([]int32, 8), Positions: make([]int32, 8), SlotMapping: make([]int32, 8),
		Seqs:          []Seq{{QueryStart: 0, QueryLen: 5}, {QueryStart: 5, QueryLen: 1}, {QueryStart: 6, QueryLen: 2}},
		LogitsIndices: []int{4, 5, 7},
	}
	mbs := m.microBatches(b)
	if len(mbs) != 2 {
		t.Fatalf("%d micro-batches, want 2", len(mbs))
	}
	first, second := mbs[0].batch, mbs[1].batch
	if len(first.Tokens) != 5 || len(first.Seqs) != 1 || fmt.Sprint(first.LogitsIndices) != "[4]" || mbs[0].out != 0 {
		t.Errorf("first micro-batch: %d tokens, %d sequences, logits %v at %d", len(first.Tokens), len(first.Seqs), first.LogitsIndices, mbs[0].out)
	}
	if len(second.Tokens) != 3 || second.Seqs[0].QueryStart != 0 || second.Seqs[1].QueryStart != 1 ||
		fmt.Sprint(second.LogitsIndices) != "[0 2]" || mbs[1].out != 1 {
		t.Errorf("second micro-batch: %d tokens, sequences %+v, logits %v at %d", len(second.Tokens), second.Seqs, second.LogitsIndices, mbs[1].out)
	}
	b.LogitsIndices = []int{7, 4}
	if n := len(m.microBatches(b)); n != 1 {
		t.Errorf("logits rows out of order: %d micro-batches, want 1", n)
	}
	one := &Batch{Tokens: make([]int32, 3), Seqs: []Seq{{QueryLen: 3}}}
	if n := len(m.microBatches(one)); n != 1 {
		t.Errorf("one sequence: %d micro-batches, want 1", n)
	}
}

// TestSplitCachePerRank: each rank's part of the cache holds its own layers and KV heads
// (a copy of one KV head when there are fewer than ranks), over the same blocks.
func TestSplitCachePerRank(t *testing.T) {
	s, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	c := smallConfig(s.Config) // 2 layers, 2 KV heads
	fm := writeTwin(t, c, quant.F32, synth.GGUF)
	for _, p := range layouts {
		m, err := New(fm, Options{Backends: cpuBackends(t, 1, p), Parallel: p})
		if err != nil {
			t.Fatal(err)
		}
		kv, err := m.NewKVCache(6, 4)
		if err != nil {
			t.Fatal(err)
		}
		specs := kv.Specs()
		if len(specs) != p.Ranks() {
			t.Fatalf("tp%d-pp%d: %d cache parts, want %d", p.Tensor, p.Pipeline, len(specs), p.Ranks())
		}
		wantHeads := max(c.KVHeads/p.Tensor, 1)
		for r, sp := range specs {
			if sp.NumBlocks != 6 || sp.BlockSize != 4 || sp.KVHeads != wantHeads || sp.Layers != c.Layers/p.Pipeline {
				t.Errorf("tp%d-pp%d rank %d: %+v, want 6 blocks of 4, %d KV heads, %d layers", p.Tensor, p.Pipeline, r, sp, wantHeads, c.Layers/p.Pipeline)
			}
		}
		whole := KVBytesPerToken(c, 4*c.HeadDim)
		if got := m.KVBytesPerToken(); p.Tensor <= c.KVHeads && got != whole {
			t.Errorf("tp%d-pp%d: %d cache bytes per token over all ranks, the whole model takes %d", p.Tensor, p.Pipeline, got, whole)
		}
		if rc := m.RankConfig(); KVBytesPerToken(rc, 4*rc.HeadDim)*int64(p.Ranks()) < whole {
			t.Errorf("tp%d-pp%d: rank config %+v holds less than its share", p.Tensor, p.Pipeline, rc)
		}
		m.Close()
	}
}

// failingBackend is a CPU backend whose matmuls (plain or fused) fail from the failAt-th
// call on, for the abort test; it forms groups with others of its kind through the CPU backends inside.
type failingBackend struct {
	*cpubackend.Backend
	calls, failAt int
}

// fail counts a matmul call and reports whether it is to fail.
func (f *failingBackend) fail() error {
	f.calls++
	if f.failAt > 0 && f.calls >= f.failAt {
		return fmt.Errorf("injected failure")
	}
	return nil
}

func (f *failingBackend) MatMul(out, x, w backend.Tensor) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Backend.MatMul(out, x, w)
}

func (f *failingBackend) MatMuls(outs []backend.Tensor, x backend.Tensor, ws []backend.Tensor) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Backend.MatMuls(outs, x, ws)
}

func (f *failingBackend) MatMulSwiGLU(out, x, gate, up backend.Tensor) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Backend.MatMulSwiGLU(out, x, gate, up)
}

func (f *failingBackend) NewGroup(members []backend.Backend) ([]backend.Communicator, error) {
	inner := make([]backend.Backend, len(members))
	for i, m := range members {
		inner[i] = m.(*failingBackend).Backend
	}
	return f.Backend.NewGroup(inner)
}

// TestRankFailureAborts: when one rank's op fails mid-step, its peers waiting in an
// all-reduce are released, Forward returns the rank's error, and the model refuses later
// steps instead of hanging.
func TestRankFailureAborts(t *testing.T) {
	s, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	fm := writeTwin(t, smallConfig(s.Config), quant.F32, synth.GGUF)
	for _, p := range []Parallel{{Tensor: 2, Pipeline: 1}, {Tensor: 1, Pipeline: 2}} {
		bes := make([]backend.Backend, p.Ranks())
		for i := range bes {
			f := &failingBackend{Backend: cpubackend.New(1)}
			if i == len(bes)-1 {
				f.failAt = 3
			}
			bes[i] = f
			defer f.Close()
		}
		m, err := New(fm, Options{Backends: bes, Parallel: p})
		if err != nil {
			t.Fatal(err)
		}
		kv, err := m.NewKVCache(4, 8)
		if err != nil {
			t.Fatal(err)
		}
		b := batchFor([]seqRun{{prompt: testTokens(5), table: []int32{1}}}, []int{0}, []int{5}, 8)
		done := make(chan error, 1)
		go func() {
			_, err := m.Forward(b, kv)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "injected failure") {
				t.Fatalf("tp%d-pp%d: Forward returned %v, want the injected failure", p.Tensor, p.Pipeline, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("tp%d-pp%d: Forward hung after a rank failed", p.Tensor, p.Pipeline)
		}
		if _, err := m.Forward(b, kv); err == nil || !strings.Contains(err.Error(), "earlier step") {
			t.Errorf("tp%d-pp%d: a step after the failure returned %v", p.Tensor, p.Pipeline, err)
		}
		m.Close()
	}
}

// TestParallelRefusesBadSplits: splits the shape does not allow are refused with the
// reason, before any weight is uploaded.
func TestParallelRefusesBadSplits(t *testing.T) {
	base := format.Config{Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 64, FFNDim: 256}
	cases := []struct {
		name string
		c    func(c *format.Config)
		p    Parallel
		want string
	}{
		{"heads", func(c *format.Config) { c.Heads = 6 }, Parallel{Tensor: 4, Pipeline: 1}, "attention heads"},
		{"kv heads", func(c *format.Config) { c.Heads, c.KVHeads = 12, 3 }, Parallel{Tensor: 2, Pipeline: 1}, "KV heads"},
		{"ffn", func(c *format.Config) { c.FFNDim = 250 }, Parallel{Tensor: 4, Pipeline: 1}, "feed-forward"},
		{"layers", func(c *format.Config) {}, Parallel{Tensor: 1, Pipeline: 3}, "layers"},
		{"zero", func(c *format.Config) {}, Parallel{Tensor: 0, Pipeline: 1}, "at least 1"},
	}
	for _, tc := range cases {
		c := base
		tc.c(&c)
		if err := tc.p.Check(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.want)
		}
	}
	if err := (Parallel{Tensor: 4, Pipeline: 2}).Check(base); err != nil {
		t.Errorf("a valid split was refused: %v", err)
	}
	// Q4_K blocks hold 256 columns: the output projection's 512 columns do not split in 4.
	s, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	fm := writeTwin(t, smallConfig(s.Config), quant.Q4_K, synth.GGUF)
	if _, err := New(fm, Options{Backends: cpuBackends(t, 1, Parallel{Tensor: 4, Pipeline: 1}), Parallel: Parallel{Tensor: 4, Pipeline: 1}}); err == nil || !strings.Contains(err.Error(), "blocks") {
		t.Errorf("a split across Q4_K blocks: %v", err)
	}
}
