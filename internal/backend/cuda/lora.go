package cuda

import "fmt"

// LoRAMember is one projection of a LoRA group: its stacked slot matrices A,
// [nSlots*maxRank][in], and B transposed, [nSlots*maxRank][OutDim], and its output,
// [tokens][OutDim]. All are F32.
type LoRAMember struct {
	Out, A, B Buffer
	OutDim    int
}

// LoRAMaxGroup is the most projections one LoRAGroup call takes (q, k and v).
const LoRAMaxGroup = 3

// LoRAGroup adds the low-rank updates of a step's adapters to the outputs of up to
// LoRAMaxGroup projections that take the same input x, [tokens][in] (Punica's BGMV, both
// products in one launch for the whole group): out_g[t] += B_g,s·(A_g,s·x[t]) for every
// token t whose slot s = slots[t] is >= 0, over slot s's first ranks[s] ranks. slots and
// ranks are I32 (tokens and nSlots entries).
func (o *Ops) LoRAGroup(ms []LoRAMember, x, slots, ranks Buffer, tokens, in, maxRank, nSlots int) error {
	if len(ms) < 1 || len(ms) > LoRAMaxGroup {
		return fmt.Errorf("cuda lora: %d projections in a group, want 1 to %d", len(ms), LoRAMaxGroup)
	}
	if tokens <= 0 || in <= 0 || maxRank <= 0 || nSlots <= 0 {
		return fmt.Errorf("cuda lora: bad shape tokens=%d in=%d rank=%d slots=%d", tokens, in, maxRank, nSlots)
	}
	errs := []error{need("lora", "x", x, tokens*in, F32), need("lora", "slots", slots, tokens, I32), need("lora", "ranks", ranks, nSlots, I32)}
	var outs, as, bs [LoRAMaxGroup]Buffer
	var dims [LoRAMaxGroup]int
	// A block repeats its member's dots (in multiply-adds a rank) for the columns it adds (cols
	// a rank): cols of about in balances the two. The kernels do little work per thread, so
	// their time is latency: more, shorter blocks beat fewer long ones.
	block := min(1024, max(128, (in/4+31)/32*32)) // a token's input in about four strides
	cols := max(block, (in+block-1)/block*block)
	columnBlocks := 0
	for g, m := range ms {
		if m.OutDim <= 0 {
			return fmt.Errorf("cuda lora: projection %d of width %d", g, m.OutDim)
		}
		errs = append(errs, need("lora", "out", m.Out, tokens*m.OutDim, F32), need("lora", "a", m.A, nSlots*maxRank*in, F32),
			need("lora", "b", m.B, nSlots*maxRank*m.OutDim, F32))
		outs[g], as[g], bs[g], dims[g] = m.Out, m.A, m.B, m.OutDim
		columnBlocks += (m.OutDim + cols - 1) / cols
	}
	if err := firstErr(errs...); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "lora_group_f32", Dim3{tokens, columnBlocks, 1}, Dim3{block, 1, 1}, 4*maxRank,
		outs[0], outs[1], outs[2], x, as[0], as[1], as[2], bs[0], bs[1], bs[2], slots, ranks, in, dims[0], dims[1], dims[2], cols, maxRank)
}
