package cpu

import (
	"fmt"
	"slices"
)

// LoRA describes one segmented low-rank update of a projection (multi-LoRA serving): for
// every token t whose slot s = Slots[t] is >= 0, Out[t] += B_s · (A_s · X[t]) over slot s's
// first Ranks[s] ranks. A stacks the slots' A matrices, [slots*MaxRank][In] (slot s's in
// rows s*MaxRank..), B their B matrices transposed, [slots*MaxRank][OutDim] (slot s's in
// rows s*MaxRank..), and U ([Tokens][MaxRank]) receives A_s · X[t].
type LoRA struct {
	Out, X, U, A, B             []float32
	Tokens, In, OutDim, MaxRank int
	Slots, Ranks                []int32
}

// check validates the operands' sizes and every token's slot.
func (l *LoRA) check() error {
	slots := len(l.Ranks)
	switch {
	case len(l.Slots) != l.Tokens:
		return fmt.Errorf("lora: %d slots for %d tokens", len(l.Slots), l.Tokens)
	case len(l.X) < l.Tokens*l.In || len(l.Out) < l.Tokens*l.OutDim || len(l.U) < l.Tokens*l.MaxRank:
		return fmt.Errorf("lora: buffers of %d, %d, %d values for %d tokens of %d in, %d out, rank %d", len(l.X), len(l.Out), len(l.U), l.Tokens, l.In, l.OutDim, l.MaxRank)
	case len(l.A) != slots*l.MaxRank*l.In || len(l.B) != slots*l.MaxRank*l.OutDim:
		return fmt.Errorf("lora: A of %d and B of %d values for %d slots of rank %d, %d in, %d out", len(l.A), len(l.B), slots, l.MaxRank, l.In, l.OutDim)
	}
	for s, r := range l.Ranks {
		if r < 0 || int(r) > l.MaxRank {
			return fmt.Errorf("lora: slot %d of rank %d, the bound is %d", s, r, l.MaxRank)
		}
	}
	for t, s := range l.Slots {
		if int(s) >= slots {
			return fmt.Errorf("lora: token %d: slot %d outside %d", t, s, slots)
		}
	}
	return nil
}

// LoRAMatMulReference is the scalar twin of LoRAMatMul: token by token, the plain loops.
func LoRAMatMulReference(l *LoRA) error {
	if err := l.check(); err != nil {
		return err
	}
	for t, s := range l.Slots {
		if s < 0 {
			continue
		}
		r := int(l.Ranks[s])
		x := l.X[t*l.In : (t+1)*l.In]
		u := l.U[t*l.MaxRank : t*l.MaxRank+r]
		for j := range r {
			a := l.A[(int(s)*l.MaxRank+j)*l.In:][:l.In]
			var sum float32
			for i, v := range x {
				sum += a[i] * v
			}
			u[j] = sum
		}
		for o := range l.OutDim {
			var sum float32
			for j, v := range u {
				sum += l.B[(int(s)*l.MaxRank+j)*l.OutDim+o] * v
			}
			l.Out[t*l.OutDim+o] += sum
		}
	}
	return nil
}

// LoRAMatMul adds the low-rank updates l describes (see LoRA) on the pool's threads,
// segment by segment as Punica's SGMV does: the tokens of a run of one adapter (a
// sequence's prefill chunk, or neighbouring decode tokens of one adapter) share each row of
// its A and B while it is in cache. The threads split the tokens; each computes its
// tokens' U = A·x, then adds, rank after rank, a row of Bᵀ scaled by U to each token's
// output. A token's sums run in one order whatever the batch and whichever thread takes
// it, so that its result does not depend on its neighbours.
func LoRAMatMul(p *Pool, l *LoRA) error {
	if err := l.check(); err != nil {
		return err
	}
	if !slices.ContainsFunc(l.Slots, func(s int32) bool { return s >= 0 }) {
		return nil
	}
	dot, axpy := p.kern.dotF32, p.kern.axpy
	p.Run(l.Tokens, func(start, end int) {
		for t := start; t < end; t++ {
			s := l.Slots[t]
			if s < 0 {
				continue
			}
			x := l.X[t*l.In : (t+1)*l.In]
			for j := range int(l.Ranks[s]) {
				l.U[t*l.MaxRank+j] = dot(l.A[(int(s)*l.MaxRank+j)*l.In:][:l.In], x)
			}
		}
		for t0 := start; t0 < end; {
			s, t1 := l.Slots[t0], t0+1
			for t1 < end && l.Slots[t1] == s {
				t1++
			}
			if s >= 0 {
				for j := range int(l.Ranks[s]) {
					b := l.B[(int(s)*l.MaxRank+j)*l.OutDim:][:l.OutDim]
					for t := t0; t < t1; t++ {
						axpy(l.Out[t*l.OutDim:][:l.OutDim], l.U[t*l.MaxRank+j], b)
					}
				}
			}
			t0 = t1
		}
	})
	return nil
}
