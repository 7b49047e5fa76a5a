package cudabackend_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/backendtest"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// synthModel returns a small BF16 model of llama-3.2-1b's shape (2 layers, a vocabulary of
// 512) made in memory, on be, with a KV cache of kv elements (a GGML type name).
func synthModel(t *testing.T, be backend.Backend, kv string) (*model.Model, *format.Model) {
	t.Helper()
	dt, err := quant.ParseType(kv)
	if err != nil {
		t.Fatal(err)
	}
	return synthModelKV(t, be, dt)
}

// synthModelKV is synthModel with the KV cache's element type as a quant.Type (the
// quantized cache types have no GGML name).
func synthModelKV(t *testing.T, be backend.Backend, dt quant.Type) (*model.Model, *format.Model) {
	t.Helper()
	shape, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	shape.Config.Layers, shape.Config.VocabSize = 2, 512
	fm, err := synth.Model(shape, quant.BF16, 3)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(fm, model.Options{Backends: []backend.Backend{be}, KVCacheDType: dt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, fm
}

// stepBatch is a prefill step of seqs sequences of lens tokens each, sequence i in blocks
// i*4.., every token's logits wanted.
func stepBatch(lens []int, bs int) *model.Batch {
	b := &model.Batch{}
	for i, n := range lens {
		table := []int32{int32(4 * i), int32(4*i + 1), int32(4*i + 2), int32(4*i + 3)}
		start := len(b.Tokens)
		for p := range n {
			b.Tokens = append(b.Tokens, int32(3+(i*37+p*11)%500))
			b.Positions = append(b.Positions, int32(p))
			b.SlotMapping = append(b.SlotMapping, table[p/bs]*int32(bs)+int32(p%bs))
			b.LogitsIndices = append(b.LogitsIndices, len(b.Tokens)-1)
		}
		b.Seqs = append(b.Seqs, model.Seq{BlockTable: table, QueryStart: start, QueryLen: n, ContextLen: n})
	}
	return b
}

// TestBackendMaskedTokens: on the GPU, ForwardGreedy under vocabulary masks picks
// sample.Greedy of the step's logits with the disallowed tokens at -Inf, row by row (some
// rows unmasked); ForwardSample under masks draws only allowed tokens, the one token of a
// one-token mask, greedy (top-1) rows the masked greedy token, and sampled rows what
// sample.DrawIndexOrder draws from the masked logits (all but rounding-boundary draws).
func TestBackendMaskedTokens(t *testing.T) {
	be := newBackend(t)
	m, _ := synthModel(t, be, "f32")
	const bs = 16
	kv, err := m.NewKVCache(64, bs)
	if err != nil {
		t.Fatal(err)
	}
	b := stepBatch([]int{7, 1, 20, 3, 12}, bs)
	logits, err := m.Forward(b, kv)
	if err != nil {
		t.Fatal(err)
	}
	vocab, rows := m.Config().VocabSize, len(b.LogitsIndices)
	r := rand.New(rand.NewPCG(11, 12))
	masks := backendtest.RandomMasks(r, rows, vocab)
	calls := 0
	maskFn := func() ([][]uint32, error) {
		calls++
		return masks, nil
	}
	// The same step again rewrites the same slots with the same values.
	ids, err := m.ForwardGreedy(b, kv, maskFn)
	if err != nil {
		t.Fatal(err)
	}
	same := 0
	for i, id := range ids {
		want := sample.Greedy(backendtest.Disallowed(logits[i*vocab:(i+1)*vocab], masks[i]))
		if int(id) == want {
			same++
		} else {
			t.Errorf("row %d: masked device greedy %d, host %d", i, id, want)
		}
	}
	fmt.Printf("RESULT|model|masked device argmax vs sample.Greedy (%d rows, %d masked)|%d/%d equal|\n", rows, rows-(rows+2)/3, same, rows)

	settings := make([]backend.SampleRow, rows)
	for i := range settings {
		settings[i] = backend.SampleRow{Temperature: 0.8, TopK: []int32{0, 40}[i%2], TopP: []float32{1, 0.9}[(i/2)%2], Uniform: r.Float32()}
		if i%5 == 4 {
			settings[i] = backend.SampleRow{Temperature: 1, TopK: 1, TopP: 1}
		}
	}
	drawn, err := m.ForwardSample(b, kv, settings, maskFn)
	if err != nil {
		t.Fatal(err)
	}
	exact := 0
	for i, id := range drawn {
		row := backendtest.Disallowed(logits[i*vocab:(i+1)*vocab], masks[i])
		s := settings[i]
		want := sample.DrawIndexOrder(row, s.Temperature, int(s.TopK), s.TopP, float64(s.Uniform))
		switch {
		case !backend.Allowed(masks[i], int(id)):
			t.Errorf("row %d: drew disallowed token %d", i, id)
		case int(id) == want:
			exact++
		case i == 1 || s.TopK == 1:
			t.Errorf("row %d (%+v): drew %d, want %d", i, s, id, want)
		}
	}
	if exact < rows-2 {
		t.Errorf("only %d/%d masked draws equal the host's", exact, rows)
	}
	if calls != 2 {
		t.Errorf("MaskFunc called %d times over two steps", calls)
	}
	fmt.Printf("RESULT|model|masked device sampling vs sample.DrawIndexOrder (%d rows)|%d/%d equal|no disallowed draw\n", rows, exact, rows)
}
