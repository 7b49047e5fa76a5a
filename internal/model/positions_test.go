package model

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// positionedRun runs tokens as one sequence whose i-th token is rotated as at positions[i]:
// a prefill chunk of the first 13 tokens (every row's logits), a chunk of the next 4 in a
// step with another sequence, then the rest one decode step each, over a scattered block
// table. It returns the logits after every token.
func positionedRun(t *testing.T, m *Model, tokens, positions []int32) [][]float32 {
	t.Helper()
	const bs = 4
	kv, err := m.NewKVCache(16, bs)
	if err != nil {
		t.Fatal(err)
	}
	table := []int32{9, 2, 14, 5, 0, 11, 7}
	other := seqRun{prompt: testTokens(6), table: []int32{3, 12}}
	vocab := m.Config().VocabSize
	var out [][]float32
	step := func(from, to int, withOther bool) {
		b := &Batch{}
		for i := from; i < to; i++ {
			b.Tokens = append(b.Tokens, tokens[i])
			b.Positions = append(b.Positions, positions[i])
			b.SlotMapping = append(b.SlotMapping, table[i/bs]*bs+int32(i%bs))
			b.LogitsIndices = append(b.LogitsIndices, i-from)
		}
		b.Seqs = []Seq{{BlockTable: table, QueryLen: to - from, ContextLen: to}}
		if withOther {
			o := batchFor([]seqRun{other}, []int{0}, []int{len(other.prompt)}, bs)
			b.Seqs = append(b.Seqs, Seq{BlockTable: other.table, QueryStart: len(b.Tokens), QueryLen: len(o.Tokens), ContextLen: len(o.Tokens)})
			b.Tokens = append(b.Tokens, o.Tokens...)
			b.Positions = append(b.Positions, o.Positions...)
			b.SlotMapping = append(b.SlotMapping, o.SlotMapping...)
		}
		logits, err := m.Forward(b, kv)
		if err != nil {
			t.Fatal(err)
		}
		for i := range to - from {
			out = append(out, logits[i*vocab:(i+1)*vocab])
		}
	}
	step(0, 13, false)
	step(13, 17, true)
	for i := 17; i < len(tokens); i++ {
		step(i, i+1, false)
	}
	return out
}

// refPositioned runs the reference path over tokens at the given positions.
func refPositioned(t *testing.T, fm *format.Model, tokens, positions []int32) [][]float32 {
	t.Helper()
	r, err := NewReference(fm)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	for i, tok := range tokens {
		l, err := r.ForwardAt(int(tok), int(positions[i]))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// positionShapes are the shapes the position tests run: interleaved RoPE with Llama 3
// frequency scaling, and NeoX RoPE with biases and GQA.
func positionShapes(t *testing.T) map[string]*format.Model {
	t.Helper()
	out := map[string]*format.Model{}
	for _, name := range []string{"llama-3.2-1b", "qwen2.5-0.5b"} {
		s, err := synth.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = writeTwin(t, smallConfig(s.Config), quant.F32, synth.GGUF)
	}
	return out
}

// TestPositionsApartFromContext: tokens whose positions differ from their context indices
// unevenly attend to exactly the tokens before them in the context: the fast path's
// logits, over prefill chunks, a batched chunk and decode steps, match the reference path
// run with the same explicit positions. Attention that took its causal limit from the
// positions would attend to entries not yet written (positions jumping ahead) or leave
// out ones that are (positions repeated, as a compressed cache's are).
func TestPositionsApartFromContext(t *testing.T) {
	uneven := map[string][]int32{
		"jumps":    {0, 1, 2, 2, 2, 7, 8, 9, 30, 31, 31, 32, 40, 41, 3, 4, 50, 51, 52, 20, 60},
		"repeated": {0, 0, 1, 1, 1, 2, 3, 3, 4, 5, 5, 5, 5, 6, 7, 7, 8, 9, 9, 10, 10},
	}
	for name, fm := range positionShapes(t) {
		for kind, positions := range uneven {
			t.Run(name+"/"+kind, func(t *testing.T) {
				checkPositioned(t, fm, positions)
			})
		}
	}
}

// checkPositioned compares the fast path with the reference path over tokens at the given
// positions, and checks that the positions matter: at positions 0, 1, 2, ... the same
// tokens give other logits.
func checkPositioned(t *testing.T, fm *format.Model, positions []int32) {
	t.Helper()
	tokens := testTokens(len(positions))
	m := cpuModel(t, fm, Parallel{1, 1}, quant.F32)
	want := refPositioned(t, fm, tokens, positions)
	if e := relErr(positionedRun(t, m, tokens, positions), want); e > dtypeTolerance[quant.F32] {
		t.Errorf("logits differ from the reference path's by %.3g (relative), allowed %g", e, dtypeTolerance[quant.F32])
	}
	plain := make([]int32, len(positions))
	for i := range plain {
		plain[i] = int32(i)
	}
	if e := relErr(positionedRun(t, m, tokens, plain), want); e < 1e-3 {
		t.Errorf("positions 0..n give the same logits (%.3g apart): the test shows nothing", e)
	}
}

// TestShiftedPositions: RoPE is relative, so a whole sequence's positions shifted by a
// constant give the logits of the unshifted run, up to the rounding of the larger angles.
func TestShiftedPositions(t *testing.T) {
	const n, tol = 21, 5e-5
	tokens := testTokens(n)
	for name, fm := range positionShapes(t) {
		m := cpuModel(t, fm, Parallel{1, 1}, quant.F32)
		base := make([]int32, n)
		for i := range base {
			base[i] = int32(i)
		}
		want := positionedRun(t, m, tokens, base)
		for _, shift := range []int32{1, 37, 500} {
			shifted := make([]int32, n)
			for i := range shifted {
				shifted[i] = base[i] + shift
			}
			got := positionedRun(t, m, tokens, shifted)
			e := relErr(got, want)
			t.Logf("%s: shift %d: logits %.3g apart (relative)", name, shift, e)
			if e > tol {
				t.Errorf("%s: positions shifted by %d: logits %.3g apart (relative), allowed %g", name, shift, e, tol)
			}
			if shift == 500 && e == 0 {
				t.Errorf("%s: a shift of 500 changed no bit: were the positions used?", name)
			}
		}
	}
}
