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

// LoRATile is the most tokens of one slot that one block of the LoRA kernels takes: it
// reads the slot's A or B rows once for all of them (LORA_TILE in lora.cu).
const LoRATile = 8

// loraRanks and loraWarps are lora.cu's LORA_RANKS (the ranks of one shrink block) and
// LORA_WARPS (its warps).
const loraRanks, loraWarps = 4, 8

// LoRATiles returns how many tiles LoRAPlan may fill for tokens tokens over nSlots slots:
// a slot's last tile may be partial, so at most ceil(tokens / LoRATile) + nSlots. The count
// depends on the step's shape only, so a captured graph's launch fits every step of it.
func LoRATiles(tokens, nSlots int) int { return (tokens+LoRATile-1)/LoRATile + nSlots }

// LoRAPlan groups a step's tokens by adapter slot for LoRAGroup: order gets the indices of
// the tokens of slot 0, then slot 1, ... (tokens of no slot, -1, are left out; the rest of
// order is zero), and tiles (LoRATiles entries) runs of at most LoRATile of them, each
// start<<4 | count into order, the unused ones zero. Slots must lie in [-1, nSlots).
func LoRAPlan(slots []int32, nSlots int, order, tiles []int32) {
	counts := make([]int32, nSlots+1)
	for _, s := range slots {
		if s >= 0 {
			counts[s+1]++
		}
	}
	for s := 1; s <= nSlots; s++ {
		counts[s] += counts[s-1]
	}
	clear(order)
	clear(tiles)
	next := append([]int32(nil), counts[:nSlots]...)
	for t, s := range slots {
		if s >= 0 {
			order[next[s]] = int32(t)
			next[s]++
		}
	}
	i := 0
	for s := 0; s < nSlots; s++ {
		for start := counts[s]; start < counts[s+1]; start += LoRATile {
			tiles[i] = start<<4 | min(LoRATile, counts[s+1]-start)
			i++
		}
	}
}

// LoRAGroup adds the low-rank updates of a step's adapters to the outputs of up to
// LoRAMaxGroup projections that take the same input x, [tokens][in] (Punica's SGMV, each
// product in one launch for the whole group): out_g[t] += B_g,s·(A_g,s·x[t]) for every
// token t whose slot s = slots[t] is >= 0, over slot s's first ranks[s] ranks, with A_g,s·x[t]
// in columns g*maxRank.. of u ([tokens][uCols] F32, uCols >= len(ms)*maxRank). slots, ranks,
// order and tiles are I32 (tokens, nSlots, tokens and LoRATiles entries), order and tiles as
// LoRAPlan fills them from slots.
func (o *Ops) LoRAGroup(ms []LoRAMember, x, u, slots, ranks, order, tiles Buffer, tokens, in, maxRank, nSlots, uCols int) error {
	if len(ms) < 1 || len(ms) > LoRAMaxGroup {
		return fmt.Errorf("cuda lora: %d projections in a group, want 1 to %d", len(ms), LoRAMaxGroup)
	}
	if tokens <= 0 || in <= 0 || maxRank <= 0 || nSlots <= 0 || uCols < len(ms)*maxRank {
		return fmt.Errorf("cuda lora: bad shape tokens=%d in=%d rank=%d slots=%d u columns=%d for %d projections", tokens, in, maxRank, nSlots, uCols, len(ms))
	}
	nTiles := LoRATiles(tokens, nSlots)
	errs := []error{need("lora", "x", x, tokens*in, F32), need("lora", "u", u, tokens*uCols, F32), need("lora", "slots", slots, tokens, I32),
		need("lora", "ranks", ranks, nSlots, I32), need("lora", "order", order, tokens, I32), need("lora", "tiles", tiles, nTiles, I32)}
	var outs, as, bs [LoRAMaxGroup]Buffer
	var dims [LoRAMaxGroup]int
	// The expansion's blocks add expandCols columns a thread each: narrow blocks, so that
	// even one projection's columns make a grid that fills the multiprocessors.
	const expandCols = 128
	columnBlocks := 0
	for g, m := range ms {
		if m.OutDim <= 0 {
			return fmt.Errorf("cuda lora: projection %d of width %d", g, m.OutDim)
		}
		errs = append(errs, need("lora", "out", m.Out, tokens*m.OutDim, F32), need("lora", "a", m.A, nSlots*maxRank*in, F32),
			need("lora", "b", m.B, nSlots*maxRank*m.OutDim, F32))
		outs[g], as[g], bs[g], dims[g] = m.Out, m.A, m.B, m.OutDim
		columnBlocks += (m.OutDim + expandCols - 1) / expandCols
	}
	if err := firstErr(errs...); err != nil {
		return err
	}
	chunks := (maxRank + loraRanks - 1) / loraRanks
	if err := o.Dev.Launch(o.Kern.mod, "lora_shrink_f32", Dim3{nTiles, len(ms) * chunks, 1}, Dim3{32 * loraWarps, 1, 1}, 0,
		u, x, as[0], as[1], as[2], slots, ranks, order, tiles, in, maxRank, uCols); err != nil {
		return err
	}
	return o.Dev.Launch(o.Kern.mod, "lora_expand_f32", Dim3{nTiles, columnBlocks, 1}, Dim3{expandCols, 1, 1}, 4*LoRATile*maxRank,
		outs[0], outs[1], outs[2], u, bs[0], bs[1], bs[2], slots, ranks, order, tiles, dims[0], dims[1], dims[2], maxRank, uCols)
}
