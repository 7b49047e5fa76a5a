package cpu

import (
	"fmt"
	"sync"
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
	case l.In < 1 || l.OutDim < 1:
		return fmt.Errorf("lora: %d in and %d out features", l.In, l.OutDim)
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

// loraGroup is the most tokens of one adapter the LoRA kernels take at a time.
const loraGroup = 4

// loraScratch holds LoRAMatMul's token order, owned by a Pool and reused from call to call.
type loraScratch struct {
	mu sync.Mutex // serializes products on the Pool
	// order lists the tokens that have an adapter, slot by slot (in token order within a
	// slot); groups[g] is where group g of at most loraGroup tokens of one slot starts in
	// order, and groups[len-1] is len(order).
	order, groups []int32
	count         []int32 // per slot
}

// LoRAMatMul adds the low-rank updates l describes (see LoRA) on the pool's threads, as
// Punica's SGMV does: the tokens are gathered by adapter (whatever their places in the
// batch) into groups of up to 4, and the threads take the groups, each group computing
// its tokens' U = A·x for 4 ranks at a time, 4 tokens against each row of A, then adding
// B·U to the 4 tokens' outputs while they stay in registers (the kernels loraShrink and
// loraExpand). A token's sums run in one order whatever the batch, the group it falls
// in and whichever thread takes it, so that its result does not depend on its neighbours.
func LoRAMatMul(p *Pool, l *LoRA) error {
	if err := l.check(); err != nil {
		return err
	}
	s := &p.lora
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count = grow(s.count, len(l.Ranks))
	clear(s.count)
	for _, slot := range l.Slots {
		if slot >= 0 && l.Ranks[slot] > 0 {
			s.count[slot]++
		}
	}
	s.order, s.groups = s.order[:0], s.groups[:0]
	for slot, c := range s.count {
		if c == 0 {
			continue
		}
		start := len(s.order)
		for t, ts := range l.Slots {
			if int(ts) == slot {
				s.order = append(s.order, int32(t))
			}
		}
		for g := start; g < len(s.order); g += loraGroup {
			s.groups = append(s.groups, int32(g))
		}
	}
	if len(s.groups) == 0 {
		return nil
	}
	s.groups = append(s.groups, int32(len(s.order)))
	k := p.kern
	run := func(start, end int) {
		for g := start; g < end; g++ {
			l.group(k, s.order[s.groups[g]:s.groups[g+1]])
		}
	}
	if len(s.order)*l.MaxRank*(l.In+l.OutDim) < loraParallelMACs {
		run(0, len(s.groups)-1)
	} else {
		p.Run(len(s.groups)-1, run)
	}
	return nil
}

// loraParallelMACs is the least multiply-adds (tokens x rank x (in + out)) for which
// LoRAMatMul shares its groups out to the pool's threads: a smaller product (a decode
// step's: 32 tokens of rank 16 over 512 in and 1280 out are 0.9M) runs on the calling
// thread, where it costs less than waking the workers and waiting for the last (measured
// on 2 shared cores of an AMD EPYC with AVX-512: a 32-sequence decode step of the trained
// 25M target with one rank-16 adapter took 0.90x the base's CPU time with the pool, 0.95x
// without); a prefill chunk's products are tens of millions.
const loraParallelMACs = 1 << 22

// group adds the updates of tokens, at most loraGroup tokens of one slot (of rank > 0).
func (l *LoRA) group(k *kernels, tokens []int32) {
	slot := int(l.Slots[tokens[0]])
	rank, nt := int(l.Ranks[slot]), len(tokens)
	var xs, us, outs, as [loraGroup][]float32
	for i := range loraGroup {
		t := int(tokens[min(i, nt-1)])
		xs[i] = l.X[t*l.In:][:l.In]
		us[i] = l.U[t*l.MaxRank:][:rank]
		outs[i] = l.Out[t*l.OutDim:][:l.OutDim]
	}
	a := l.A[slot*l.MaxRank*l.In:]
	var u [loraGroup * loraGroup]float32
	for r0 := 0; r0 < rank; r0 += loraGroup {
		for j := range loraGroup {
			as[j] = a[min(r0+j, rank-1)*l.In:][:l.In]
		}
		k.loraShrink(&xs, &as, nt, min(loraGroup, rank-r0), &u)
		for i := range nt {
			for j := range min(loraGroup, rank-r0) {
				us[i][r0+j] = u[i*loraGroup+j]
			}
		}
	}
	k.loraExpand(&outs, &us, nt, l.B[slot*l.MaxRank*l.OutDim:][:rank*l.OutDim], l.OutDim)
}

// loraShrinkDots is loraShrink made of nt x nr dot products (the generic and avx2 sets).
func loraShrinkDots(dot func(w, x []float32) float32, x, a *[4][]float32, nt, nr int, u *[16]float32) {
	for t := range nt {
		for r := range nr {
			u[t*4+r] = dot(a[r][:len(x[t])], x[t])
		}
	}
}

// loraExpandAxpys is loraExpand made of an axpy per token and rank (the generic and avx2
// sets).
func loraExpandAxpys(axpy func(y []float32, a float32, x []float32), out, u *[4][]float32, nt int, b []float32, ldb int) {
	for t := range nt {
		for r, v := range u[t] {
			axpy(out[t], v, b[r*ldb:][:len(out[t])])
		}
	}
}
