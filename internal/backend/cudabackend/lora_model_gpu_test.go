package cudabackend_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/lora"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// loraBaseNames are the GGUF names of the adapters' targets' base weights.
var loraBaseNames = [lora.NumTargets]string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}

// loraGreedy prefills the prompts of seqs (one adapter each, nil for the base) together in
// one step and decodes n tokens of all of them per step, returning each one's tokens.
func loraGreedy(t *testing.T, m *model.Model, prompts [][]int32, adapters []*lora.Adapter, n int) [][]int32 {
	t.Helper()
	const bs, per = 16, 4
	kv, err := m.NewKVCache(per*len(prompts)+1, bs)
	if err != nil {
		t.Fatal(err)
	}
	toks := make([][]int32, len(prompts))
	ctx := make([]int, len(prompts))
	for step := 0; step <= n; step++ {
		b := &model.Batch{}
		for i, p := range prompts {
			table := []int32{int32(per*i + 1), int32(per*i + 2), int32(per*i + 3), int32(per*i + 4)}
			in := p
			if step > 0 {
				in = toks[i][len(toks[i])-1:]
			}
			q := len(b.Tokens)
			for _, tok := range in {
				b.Tokens = append(b.Tokens, tok)
				b.Positions = append(b.Positions, int32(ctx[i]))
				b.SlotMapping = append(b.SlotMapping, table[ctx[i]/bs]*bs+int32(ctx[i]%bs))
				ctx[i]++
			}
			b.Seqs = append(b.Seqs, model.Seq{BlockTable: table, QueryStart: q, QueryLen: len(in), ContextLen: ctx[i], Adapter: adapters[i]})
			b.LogitsIndices = append(b.LogitsIndices, len(b.Tokens)-1)
		}
		logits, err := m.Forward(b, kv)
		if err != nil {
			t.Fatal(err)
		}
		v := m.Config().VocabSize
		for i := range prompts {
			toks[i] = append(toks[i], int32(sample.Greedy(logits[i*v:(i+1)*v])))
		}
	}
	return toks
}

// TestLoRAStoriesGPU: on the GPU, stories260K with a base request and requests of two
// adapters of ranks 8 and 64 batched in every step gives the greedy tokens of the
// merged-weights models (W + (alpha/r)·B·A) run alone on the GPU, and of the same batch
// through the adapters on the CPU.
func TestLoRAStoriesGPU(t *testing.T) {
	newBackend(t) // skips without a GPU
	fm := openStories(t)
	defer fm.Close()
	c := fm.Config
	all := []lora.Target{lora.Q, lora.K, lora.V, lora.O, lora.Gate, lora.Up, lora.Down}
	a8 := lora.Random(c, 8, 16, all, 0.08, 1)
	a64 := lora.Random(c, 64, 32, []lora.Target{lora.Q, lora.V, lora.O, lora.Down}, 0.04, 2)
	a8.Name, a64.Name = "r8", "r64"
	prompts := [][]int32{{1, 400, 300}, {1, 20, 30, 40}, {1, 7}}
	adapters := []*lora.Adapter{nil, a8, a64}
	const n = 24
	run := func(be backend.Backend) [][]int32 {
		m, err := model.New(fm, model.Options{Backends: []backend.Backend{be}})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if err := m.EnableLoRA(2, 64); err != nil {
			t.Fatal(err)
		}
		return loraGreedy(t, m, prompts, adapters, n)
	}
	gpu := run(newBackend(t))
	cpuBe := cpubackend.New(2)
	defer cpuBe.Close()
	cpuToks := run(cpuBe)
	for i, a := range adapters {
		if !slices.Equal(gpu[i], cpuToks[i]) {
			t.Errorf("request %d: GPU %v, CPU %v", i, gpu[i], cpuToks[i])
		}
		mf := openStories(t)
		if a != nil {
			for l := range c.Layers {
				for tg := range lora.NumTargets {
					w, _ := mf.Tensor(fmt.Sprintf("blk.%d.%s.weight", l, loraBaseNames[tg]))
					vals := make([]float32, w.Elements())
					if err := quant.Dequantize(w.Type, w.Data, vals); err != nil {
						t.Fatal(err)
					}
					merged := a.Merged(l, tg, vals)
					data := make([]byte, 4*len(merged))
					for j, v := range merged {
						binary.LittleEndian.PutUint32(data[4*j:], math.Float32bits(v))
					}
					w.Type, w.Data = quant.F32, data
				}
			}
		}
		mm, err := model.New(mf, model.Options{Backends: []backend.Backend{newBackend(t)}})
		if err != nil {
			t.Fatal(err)
		}
		want := loraGreedy(t, mm, prompts[i:i+1], []*lora.Adapter{nil}, n)[0]
		mm.Close()
		mf.Close()
		if !slices.Equal(gpu[i], want) {
			t.Errorf("request %d: batched with adapters %v, merged model alone %v", i, gpu[i], want)
		}
	}
}
