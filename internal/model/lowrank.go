package model

import (
	"slices"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
)

// A block's weight matrix W [out][in] may come factorized (kvasir lowrank): A [rank][in]
// and B [out][rank] with W ≈ B·A, stored as NAME.lr_a.weight and NAME.lr_b.weight in
// place of NAME.weight (format.LowRankA, LowRankB). The layer then runs as two matmuls,
// y = (x·Aᵀ)·Bᵀ, the first into a [tokens][rank] buffer of the step's activations (one per
// distinct rank): rank·(in+out) multiply-adds a token instead of in·out.

// factors are one factorized matrix: its A and B and the rank between them.
type factors[T any] struct {
	a, b T
	rank int
}

// linear binds the rows x cols matrix p+name+".weight" of layer lw, or its factors when
// the file stores it factorized (leaving the dense T unset).
func (b *binder[T]) linear(lw *layerWeights[T], p, name string, rows, cols int) T {
	var zero T
	if b.err != nil {
		return zero
	}
	at, factored := b.m.Tensor(p + name + format.LowRankA)
	if _, dense := b.m.Tensor(p + name + ".weight"); dense || !factored {
		return b.matrix(p+name+".weight", rows, cols)
	}
	rank := at.Shape[0]
	f := &factors[T]{rank: rank}
	f.a = b.matrix(p+name+format.LowRankA, rank, cols)
	f.b = b.matrix(p+name+format.LowRankB, rows, rank)
	if lw.lowRank == nil {
		lw.lowRank = map[string]*factors[T]{}
	}
	lw.lowRank[name] = f
	return zero
}

// factorRanks returns the distinct ranks of the layers' factorized matrices, ascending.
func factorRanks[T any](layers []layerWeights[T]) []int {
	var ranks []int
	for _, lw := range layers {
		for _, f := range lw.lowRank {
			if !slices.Contains(ranks, f.rank) {
				ranks = append(ranks, f.rank)
			}
		}
	}
	slices.Sort(ranks)
	return ranks
}

// linear computes out = x·wᵀ for layer lw's matrix name (w its dense weight), as two
// matmuls through the step's buffer of its rank when it is factorized.
func (s *shard) linear(out, x backend.Tensor, a *activations, lw *layerWeights[backend.Tensor], name string, w backend.Tensor) error {
	f := lw.lowRank[name]
	if f == nil {
		return s.be.MatMul(out, x, w)
	}
	mid := a.lowRank[slices.Index(s.w.ranks, f.rank)]
	if err := s.be.MatMul(mid, x, f.a); err != nil {
		return err
	}
	return s.be.MatMul(out, mid, f.b)
}

// projectLinear computes outs[i] = x·ws[i]ᵀ for layer lw's matrices names[i]: in one pass
// (project) when none is factorized.
func (s *shard) projectLinear(outs []backend.Tensor, x backend.Tensor, a *activations, lw *layerWeights[backend.Tensor], names []string, ws []backend.Tensor) error {
	factored := false
	for _, n := range names {
		factored = factored || lw.lowRank[n] != nil
	}
	if !factored {
		return s.project(outs, x, ws)
	}
	for i, n := range names {
		if err := s.linear(outs[i], x, a, lw, n, ws[i]); err != nil {
			return err
		}
	}
	return nil
}

// factorBytes returns the bytes of the layer's factorized matrices.
func factorBytes(lw *layerWeights[backend.Tensor]) int64 {
	var n int64
	for _, f := range lw.lowRank {
		n += tensorBytes(f.a) + tensorBytes(f.b)
	}
	return n
}

// linear returns w·x for the reference path's layer matrix name (w its dense weight), in
// two products when it is factorized.
func (r *Reference) linear(lw *layerWeights[*format.Tensor], name string, w *format.Tensor, x []float32) []float32 {
	if f := lw.lowRank[name]; f != nil {
		return r.matVec(f.b, r.matVec(f.a, x))
	}
	return r.matVec(w, x)
}
