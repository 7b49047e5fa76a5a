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
// LoRAMaxGroup projections that take the same input x, [tokens][in] (Punica's BGMV, in two
// kernels for the whole group): u[t][g*maxRank:] = A_g,s·x[t], then out_g[t] += B_g,s·u,
// for every token t whose slot s = slots[t] is >= 0, over slot s's first ranks[s] ranks.
// u is [tokens][uCols] scratch with uCols >= len(ms)*maxRank; slots and ranks are I32
// (tokens and nSlots entries).
func (o *Ops) LoRAGroup(ms []LoRAMember, x, u, slots, ranks Buffer, tokens, in, uCols, maxRank, nSlots int) error {
	if len(ms) < 1 || len(ms) > LoRAMaxGroup {
		return fmt.Errorf("cuda lora: %d projections in a group, want 1 to %d", len(ms), LoRAMaxGroup)
	}
	if tokens <= 0 || in <= 0 || maxRank <= 0 || nSlots <= 0 || uCols < len(ms)*maxRank {
		return fmt.Errorf("cuda lora: bad shape tokens=%d in=%d rank=%d slots=%d u columns=%d for %d projections", tokens, in, maxRank, nSlots, uCols, len(ms))
	}
	errs := []error{need("lora", "x", x, tokens*in, F32), need("lora", "u", u, tokens*uCols, F32),
		need("lora", "slots", slots, tokens, I32), need("lora", "ranks", ranks, nSlots, I32)}
	var outs, as, bs [LoRAMaxGroup]Buffer
	var dims [LoRAMaxGroup]int
	columnBlocks := 0
	for g, m := range ms {
		if m.OutDim <= 0 {
			return fmt.Errorf("cuda lora: projection %d of width %d", g, m.OutDim)
		}
		errs = append(errs, need("lora", "out", m.Out, tokens*m.OutDim, F32), need("lora", "a", m.A, nSlots*maxRank*in, F32),
			need("lora", "b", m.B, nSlots*maxRank*m.OutDim, F32))
		outs[g], as[g], bs[g], dims[g] = m.Out, m.A, m.B, m.OutDim
		columnBlocks += (m.OutDim + threads - 1) / threads
	}
	if err := firstErr(errs...); err != nil {
		return err
	}
	// These kernels do little work per thread: their time is latency, so the shrink's block
	// of 512 threads takes a token's input in few strides and the expand has a thread per
	// output.
	if err := o.Dev.Launch(o.Kern.mod, "lora_shrink_group_f32", Dim3{tokens, len(ms), 1}, Dim3{512, 1, 1}, 0,
		u, x, as[0], as[1], as[2], slots, ranks, in, maxRank, uCols); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "lora_expand_group_f32", Dim3{tokens, columnBlocks, 1}, Dim3{threads, 1, 1}, 0,
		outs[0], outs[1], outs[2], u, bs[0], bs[1], bs[2], slots, ranks, dims[0], dims[1], dims[2], maxRank, uCols)
}
