package cudabackend_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// TestGPUForwardHiddenMatchesCPU runs a small Qwen3 decoder's ForwardHidden (the
// last-token embeddings of a decoder embedding model) on the GPU and on the CPU backend: a
// step of two one-token sequences (a decode-shaped step, which the GPU may replay as a
// graph) and a step of sequences of 5, 33 and 1 tokens; hidden states within 1e-4 of the
// CPU's (relative to their largest value).
func TestGPUForwardHiddenMatchesCPU(t *testing.T) {
	gpuBe := newBackend(t)
	shape := synth.Shape{Name: "qwen3-hidden-test", Config: synth.Rederive(format.Config{
		Arch: "qwen3", VocabSize: 512, Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, RopeDim: 64,
		FFNDim: 512, ContextLen: 4096, NormEps: 1e-6, RopeTheta: 1000000, RopeStyle: format.RopeNeox,
		QKNorm: true, TiedEmbeddings: true,
	})}
	fm, err := synth.Model(shape, quant.F32, 21)
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	cpuBe := cpubackend.New(0)
	defer cpuBe.Close()
	var models [2]*model.Model
	var caches [2]*model.KVCache
	for i, be := range []backend.Backend{cpuBe, gpuBe} {
		if models[i], err = model.New(fm, model.Options{Backends: []backend.Backend{be}}); err != nil {
			t.Fatal(err)
		}
		defer models[i].Close()
		if caches[i], err = models[i].NewKVCache(8, 16); err != nil {
			t.Fatal(err)
		}
	}
	for _, lens := range [][]int{{1, 1}, {5, 33, 1}} {
		b := &model.Batch{}
		block := int32(0)
		for s, n := range lens {
			nb := (n + 15) / 16
			table := make([]int32, nb)
			for i := range table {
				table[i] = block
				block++
			}
			start := len(b.Tokens)
			for j := range n {
				b.Tokens = append(b.Tokens, int32((j*31+s*7+3)%512))
				b.Positions = append(b.Positions, int32(j))
				b.SlotMapping = append(b.SlotMapping, table[j/16]*16+int32(j%16))
			}
			b.Seqs = append(b.Seqs, model.Seq{BlockTable: table, QueryStart: start, QueryLen: n, ContextLen: n})
			b.LogitsIndices = append(b.LogitsIndices, len(b.Tokens)-1)
		}
		var out [2][]float32
		for i := range models {
			if out[i], err = models[i].ForwardHidden(b, caches[i]); err != nil {
				t.Fatal(err)
			}
		}
		var d, scale float64
		for j, c := range out[0] {
			d, scale = math.Max(d, math.Abs(float64(out[1][j]-c))), math.Max(scale, math.Abs(float64(c)))
		}
		fmt.Printf("RESULT|hidden|qwen3 last-token hidden states cuda vs cpu, sequences %v|%.2e|relative to max %.3g\n", lens, d/scale, scale)
		if d > 1e-4*scale {
			t.Errorf("sequences %v: GPU hidden states differ from the CPU's by %.3g (of %.3g)", lens, d, scale)
		}
	}
}
