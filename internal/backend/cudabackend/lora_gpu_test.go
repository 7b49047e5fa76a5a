package cudabackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestLoRAKernelMatchesCPU: the CUDA multi-LoRA op (lora_shrink_f32 and lora_expand_f32,
// over tokens grouped by slot in tiles) against the CPU's scalar reference, for groups of
// one to three
// projections of different widths sharing an input, on tokens of mixed slots (some
// without one) of mixed ranks, the slots written
// by WriteRows.
func TestLoRAKernelMatchesCPU(t *testing.T) {
	gpuDriver(t)
	b, err := NewBackend(BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(7, 8))
	type shape struct {
		tokens, in, maxRank, slots int
		outs                       []int
	}
	for _, sh := range []shape{{1, 64, 8, 1, []int{64}}, {37, 512, 64, 4, []int{1536, 128, 128}}, {300, 96, 16, 3, []int{40, 300}},
		{5, 3, 1, 2, []int{5}}, {64, 2048, 16, 1, []int{8192, 8192}}, {19, 130, 40, 5, []int{257, 3, 1000}},
		{9, 8192, 16, 2, []int{2048}}} { // a down projection's input: the launch's largest block
		name := fmt.Sprintf("%d tokens, %d in, rank %d, %d slots, outs %v", sh.tokens, sh.in, sh.maxRank, sh.slots, sh.outs)
		slots, ranks := make([]int32, sh.tokens), make([]int32, sh.slots)
		for s := range ranks {
			ranks[s] = int32(1 + r.IntN(sh.maxRank))
		}
		for i := range slots {
			slots[i] = int32(r.IntN(sh.slots+1)) - 1
		}
		if len(sh.outs) == 2 {
			// A run of tokens sharing one slot, as a batch of one adapter's requests is.
			for i := range slots {
				slots[i] = 0
			}
			ranks[0] = int32(sh.maxRank)
		}
		x := randVals(r, sh.tokens*sh.in, 1)
		refs := make([]*cpu.LoRA, len(sh.outs))
		starts := make([][]float32, len(sh.outs))
		for g, out := range sh.outs {
			l := &cpu.LoRA{Out: randVals(r, sh.tokens*out, 1), X: x, U: make([]float32, sh.tokens*sh.maxRank),
				A: randVals(r, sh.slots*sh.maxRank*sh.in, 1), B: randVals(r, sh.slots*out*sh.maxRank, 1), Tokens: sh.tokens, In: sh.in,
				OutDim: out, MaxRank: sh.maxRank, Slots: slots, Ranks: ranks}
			starts[g] = append([]float32(nil), l.Out...)
			if err := cpu.LoRAMatMulReference(l); err != nil {
				t.Fatal(err)
			}
			refs[g] = l
		}
		got := make([][]float32, len(sh.outs))
		err := b.Run(func() error {
			tensor2 := func(rows, cols int, v []float32) (backend.Tensor, error) {
				tt, err := b.NewTensor(quant.F32, rows, cols)
				if err == nil && v != nil {
					err = b.WriteRows(tt, 0, v)
				}
				return tt, err
			}
			xt, err := tensor2(sh.tokens, sh.in, x)
			if err != nil {
				return err
			}
			ut, err := tensor2(sh.tokens, len(sh.outs)*sh.maxRank, nil)
			if err != nil {
				return err
			}
			var outs, as, bs []backend.Tensor
			for g, out := range sh.outs {
				o, err := tensor2(sh.tokens, out, starts[g])
				if err != nil {
					return err
				}
				a, err := tensor2(sh.slots*sh.maxRank, sh.in, refs[g].A)
				if err != nil {
					return err
				}
				bm, err := tensor2(sh.slots*sh.maxRank, out, refs[g].B)
				if err != nil {
					return err
				}
				outs, as, bs = append(outs, o), append(as, a), append(bs, bm)
			}
			meta := &backend.StepMeta{Tokens: make([]int32, sh.tokens), Positions: make([]int32, sh.tokens), SlotMapping: make([]int32, sh.tokens),
				QueryStarts: []int32{0, int32(sh.tokens)}, ContextLens: []int32{int32(sh.tokens)}, BlockTables: []int32{0}, MaxBlocks: 1,
				MaxQueryLen: sh.tokens, MaxContextLen: sh.tokens, LoRASlots: slots, LoRARanks: ranks}
			st, err := b.UploadStep(meta)
			if err != nil {
				return err
			}
			if len(outs) == 1 {
				err = b.LoRAMatMul(outs[0], xt, ut, as[0], bs[0], st)
			} else {
				err = b.LoRAMatMulGroup(outs, xt, ut, as, bs, st)
			}
			if err != nil {
				return err
			}
			if err := b.dev.Sync(); err != nil {
				return err
			}
			for g, o := range outs {
				got[g] = make([]float32, sh.tokens*sh.outs[g])
				if err := cuda.Download(b.dev, got[g], o.(*tensor).buf); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for g, l := range refs {
			for i, want := range l.Out {
				if d := math.Abs(float64(got[g][i] - want)); d > 1e-4*(1+math.Abs(float64(want)))*math.Sqrt(float64(sh.in)) {
					t.Fatalf("%s: projection %d: out[%d] = %v, reference %v", name, g, i, got[g][i], want)
				}
			}
		}
	}
}
