package cudabackend_test

import (
	"fmt"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
)

// positioned runs tokens as one sequence whose i-th token is rotated as at positions[i]:
// a prefill chunk of the first 13 tokens (every row's logits: the prefill kernels), one of
// the next 4, then one decode step per token (the decode kernels), over a scattered block
// table. It returns the logits after every token, concatenated.
func positioned(t *testing.T, m *model.Model, tokens, positions []int32) []float32 {
	t.Helper()
	const bs = 16
	kv, err := m.NewKVCache(8, bs)
	if err != nil {
		t.Fatal(err)
	}
	table := []int32{5, 2, 7}
	var out []float32
	for _, r := range [][2]int{{0, 13}, {13, 17}} {
		out = append(out, positionedStep(t, m, kv, table, tokens, positions, r[0], r[1])...)
	}
	for i := 17; i < len(tokens); i++ {
		out = append(out, positionedStep(t, m, kv, table, tokens, positions, i, i+1)...)
	}
	return out
}

// positionedStep runs tokens [from, to) of positioned's sequence in one step and returns
// their logits.
func positionedStep(t *testing.T, m *model.Model, kv *model.KVCache, table, tokens, positions []int32, from, to int) []float32 {
	t.Helper()
	bs := int32(kv.BlockSize)
	b := &model.Batch{Seqs: []model.Seq{{BlockTable: table, QueryLen: to - from, ContextLen: to}}}
	for i := from; i < to; i++ {
		b.Tokens = append(b.Tokens, tokens[i])
		b.Positions = append(b.Positions, positions[i])
		b.SlotMapping = append(b.SlotMapping, table[int32(i)/bs]*bs+int32(i)%bs)
		b.LogitsIndices = append(b.LogitsIndices, i-from)
	}
	logits, err := m.Forward(b, kv)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

// refPositioned runs the reference path over tokens at explicit positions.
func refPositioned(t *testing.T, fm *format.Model, tokens, positions []int32) []float32 {
	t.Helper()
	r, err := model.NewReference(fm)
	if err != nil {
		t.Fatal(err)
	}
	var out []float32
	for i, tok := range tokens {
		l, err := r.ForwardAt(int(tok), int(positions[i]))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l...)
	}
	return out
}

// TestBackendPositionsApartFromContext: on the GPU, with f32 and bf16 KV caches (the
// scalar and tensor-core prefill kernels, the decode kernels), tokens whose positions
// differ from their context indices unevenly (jumping ahead; repeated) give the reference
// path's logits for the same explicit positions, and a whole sequence's positions shifted
// by a constant give the unshifted run's logits. Attention that took its causal limit from
// the positions would read entries not written or leave out written ones: logits off by
// order 1.
func TestBackendPositionsApartFromContext(t *testing.T) {
	const n = 21
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = int32(3 + (i*131+17)%500)
	}
	uneven := map[string][]int32{
		"jumps":    {0, 1, 2, 2, 2, 7, 8, 9, 30, 31, 31, 32, 40, 41, 3, 4, 50, 51, 52, 20, 60},
		"repeated": {0, 0, 1, 1, 1, 2, 3, 3, 4, 5, 5, 5, 5, 6, 7, 7, 8, 9, 9, 10, 10},
	}
	base, shifted := make([]int32, n), make([]int32, n)
	for i := range base {
		base[i], shifted[i] = int32(i), int32(i+300)
	}
	want := map[string][]float32{}
	for _, kvType := range []string{"f32", "bf16"} {
		be := newBackend(t)
		m, fm := synthModel(t, be, kvType)
		for kind, positions := range uneven {
			if want[kind] == nil {
				want[kind] = refPositioned(t, fm, tokens, positions)
			}
			e := relErr(positioned(t, m, tokens, positions), want[kind])
			fmt.Printf("RESULT|model|%s KV: positions apart from context indices (%s) vs reference|%.2e|rel. error of all logits\n", kvType, kind, e)
			if !(e < 2e-2) {
				t.Errorf("%s KV, %s positions: logits %.3g from the reference path's (relative), allowed 2e-2", kvType, kind, e)
			}
		}
		e := relErr(positioned(t, m, tokens, shifted), positioned(t, m, tokens, base))
		fmt.Printf("RESULT|model|%s KV: positions shifted by 300 vs unshifted|%.2e|rel. error of all logits\n", kvType, e)
		if !(e < 2e-2) {
			t.Errorf("%s KV: positions shifted by 300: logits %.3g from the unshifted run's (relative), allowed 2e-2", kvType, e)
		}
	}
}

// TestBackendSmallHeadPositions: the plain attention kernel of small head sizes
// (stories260K's 8) takes its causal limit from the context too: uneven positions give the
// reference path's logits.
func TestBackendSmallHeadPositions(t *testing.T) {
	be := newBackend(t)
	fm := openStories(t)
	defer fm.Close()
	m, err := model.New(fm, model.Options{Backends: []backend.Backend{be}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	positions := []int32{0, 1, 2, 2, 2, 7, 8, 9, 30, 31, 31, 32, 40, 41, 3, 4, 50, 51, 52, 20, 60}
	tokens := make([]int32, len(positions))
	for i := range tokens {
		tokens[i] = int32(3 + (i*131+17)%500)
	}
	e := relErr(positioned(t, m, tokens, positions), refPositioned(t, fm, tokens, positions))
	fmt.Printf("RESULT|model|stories260K (head size 8): uneven positions vs reference|%.2e|rel. error of all logits\n", e)
	if !(e < 1e-4) {
		t.Errorf("logits %.3g from the reference path's (relative), allowed 1e-4", e)
	}
}
