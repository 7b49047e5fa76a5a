package cuda

import "fmt"

// LoRA adds the low-rank updates of a step's adapters to a projection's output (Punica's
// BGMV, in two kernels): u[t] = A_s·x[t], then out[t] += B_s·u[t], for every token t whose
// slot s = slots[t] is >= 0, over slot s's first ranks[s] ranks. a stacks the slots' A,
// [nSlots*maxRank][in]; b their B transposed, [nSlots*maxRank][outDim]; u is [tokens][maxRank]
// scratch. All are F32 but slots and ranks (I32, tokens and nSlots entries).
func (o *Ops) LoRA(out, x, u, a, b, slots, ranks Buffer, tokens, in, outDim, maxRank, nSlots int) error {
	if tokens <= 0 || in <= 0 || outDim <= 0 || maxRank <= 0 || nSlots <= 0 {
		return fmt.Errorf("cuda lora: bad shape tokens=%d in=%d out=%d rank=%d slots=%d", tokens, in, outDim, maxRank, nSlots)
	}
	if err := firstErr(need("lora", "out", out, tokens*outDim, F32), need("lora", "x", x, tokens*in, F32),
		need("lora", "u", u, tokens*maxRank, F32), need("lora", "a", a, nSlots*maxRank*in, F32),
		need("lora", "b", b, nSlots*outDim*maxRank, F32), need("lora", "slots", slots, tokens, I32),
		need("lora", "ranks", ranks, nSlots, I32)); err != nil {
		return err
	}
	if err := o.Dev.Launch(o.Kern.mod, "lora_shrink_f32", Dim3{tokens, maxRank, 1}, Dim3{128, 1, 1}, 0,
		u, x, a, slots, ranks, in, maxRank); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "lora_expand_f32", Dim3{tokens, (outDim + threads - 1) / threads, 1}, Dim3{threads, 1, 1}, 0,
		out, u, b, slots, ranks, outDim, maxRank)
}
