package cudabackend

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestLoRAKernelMatchesCPU: the CUDA multi-LoRA op (lora_shrink_f32, lora_expand_f32)
// against the CPU's scalar reference, on tokens of mixed slots (some without one) of
// mixed ranks, the slots written by WriteRows.
func TestLoRAKernelMatchesCPU(t *testing.T) {
	gpuDriver(t)
	b, err := NewBackend(BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(7, 8))
	for _, sh := range [][5]int{{1, 64, 64, 8, 1}, {37, 512, 1536, 64, 4}, {300, 96, 40, 16, 3}, {5, 3, 5, 1, 2}} {
		tokens, in, out, maxRank, slots := sh[0], sh[1], sh[2], sh[3], sh[4]
		l := &cpu.LoRA{Out: randVals(r, tokens*out, 1), X: randVals(r, tokens*in, 1), U: make([]float32, tokens*maxRank),
			A: randVals(r, slots*maxRank*in, 1), B: randVals(r, slots*out*maxRank, 1), Tokens: tokens, In: in, OutDim: out, MaxRank: maxRank,
			Slots: make([]int32, tokens), Ranks: make([]int32, slots)}
		for s := range l.Ranks {
			l.Ranks[s] = int32(1 + r.IntN(maxRank))
		}
		for i := range l.Slots {
			l.Slots[i] = int32(r.IntN(slots+1)) - 1
		}
		start := append([]float32(nil), l.Out...)
		if err := cpu.LoRAMatMulReference(l); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, tokens*out)
		err := b.Run(func() error {
			ts := map[string]backend.Tensor{}
			for name, s := range map[string][2]int{"out": {tokens, out}, "x": {tokens, in}, "u": {tokens, maxRank}, "a": {slots * maxRank, in}, "b": {slots * maxRank, out}} {
				if ts[name], err = b.NewTensor(quant.F32, s[0], s[1]); err != nil {
					return err
				}
			}
			for name, v := range map[string][]float32{"out": start, "x": l.X, "a": l.A, "b": l.B} {
				if err := b.WriteRows(ts[name], 0, v); err != nil {
					return err
				}
			}
			meta := &backend.StepMeta{Tokens: make([]int32, tokens), Positions: make([]int32, tokens), SlotMapping: make([]int32, tokens),
				QueryStarts: []int32{0, int32(tokens)}, ContextLens: []int32{int32(tokens)}, BlockTables: []int32{0}, MaxBlocks: 1,
				MaxQueryLen: tokens, MaxContextLen: tokens, LoRASlots: l.Slots, LoRARanks: l.Ranks}
			st, err := b.UploadStep(meta)
			if err != nil {
				return err
			}
			if err := b.LoRAMatMul(ts["out"], ts["x"], ts["u"], ts["a"], ts["b"], st); err != nil {
				return err
			}
			if err := b.dev.Sync(); err != nil {
				return err
			}
			return cuda.Download(b.dev, got, ts["out"].(*tensor).buf)
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range l.Out {
			if d := math.Abs(float64(got[i] - want)); d > 1e-4*(1+math.Abs(float64(want)))*math.Sqrt(float64(in)) {
				t.Fatalf("shape %v: out[%d] = %v, reference %v", sh, i, got[i], want)
			}
		}
	}
}
