package cpu

import "fmt"

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

// segment is a run of consecutive tokens [start, end) of one adapter slot.
type segment struct{ start, end, slot int }

// segments splits the tokens into runs of one slot, leaving out tokens without one.
func segments(slots []int32) []segment {
	var segs []segment
	for t := 0; t < len(slots); {
		end := t + 1
		for end < len(slots) && slots[end] == slots[t] {
			end++
		}
		if slots[t] >= 0 {
			segs = append(segs, segment{t, end, int(slots[t])})
		}
		t = end
	}
	return segs
}

// LoRAMatMul adds the low-rank updates l describes (see LoRA) on the pool's threads, segment by
// segment as Punica's SGMV does: the tokens of a run of one adapter (a sequence's prefill
// chunk, or neighbouring decode tokens of one adapter) share each row of its A and B while
// it is in cache. The shrink (U = A·x) splits the tokens among the threads, the expand
// (Out += B·U) the output columns, adding rank after rank a row of Bᵀ scaled by U; each
// output's sums run in one order whatever the batch, so that a token's result does not
// depend on its neighbours.
func LoRAMatMul(p *Pool, l *LoRA) error {
	if err := l.check(); err != nil {
		return err
	}
	segs := segments(l.Slots)
	if len(segs) == 0 {
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
	})
	// Columns in chunks of 256 (whole cache lines, few axpy calls), the same whatever the
	// batch, and so each output's arithmetic.
	const chunk = 256
	p.Run((l.OutDim+chunk-1)/chunk, func(c0, c1 int) {
		start, end := c0*chunk, min(c1*chunk, l.OutDim)
		for _, sg := range segs {
			for j := range int(l.Ranks[sg.slot]) {
				b := l.B[(sg.slot*l.MaxRank+j)*l.OutDim:][start:end]
				for t := sg.start; t < sg.end; t++ {
					axpy(l.Out[t*l.OutDim:][start:end], l.U[t*l.MaxRank+j], b)
				}
			}
		}
	})
	return nil
}
