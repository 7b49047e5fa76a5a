package format

import "fmt"

// A weight matrix W [out][in] of a block may be stored factorized, as kvasir lowrank
// writes it: in place of NAME.weight, NAME.lr_a.weight A [rank][in] and NAME.lr_b.weight
// B [out][rank] with W ≈ B·A, which the model runs as two matmuls, (x·Aᵀ)·Bᵀ.
const (
	LowRankA = ".lr_a.weight"
	LowRankB = ".lr_b.weight"
)

// checkLowRank checks the factors of the matrix base+".weight" that e expects.
func checkLowRank(m *Model, base string, e expectation) error {
	a, _ := m.Tensor(base + LowRankA)
	b, ok := m.Tensor(base + LowRankB)
	if !ok {
		return fmt.Errorf("tensor %s%s is missing (its factor %s%s is there)", base, LowRankB, base, LowRankA)
	}
	out, in := e.shape[0], e.shape[1]
	if len(a.Shape) != 2 || len(b.Shape) != 2 {
		return fmt.Errorf("tensors %s%s %v and %s: want two matrices", base, LowRankA, a.Shape, LowRankB)
	}
	rank := a.Shape[0]
	if rank <= 0 || a.Shape[1] != in || b.Shape[0] != out || b.Shape[1] != rank {
		return fmt.Errorf("low-rank factors of %s.weight: A %v and B %v, want [rank][%d] and [%d][rank] (from %s)", base, a.Shape, b.Shape, in, out, e.from)
	}
	return nil
}
