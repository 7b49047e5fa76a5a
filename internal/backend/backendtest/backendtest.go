// Package backendtest holds what tests of several packages share: a float64
// matrix-product reference and random vocabulary masks (the CUDA kernels' and the GPU op
// set's tests), and CPU backends for a model's ranks (the model's and the engine's tests).
// Only tests import it.
package backendtest

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
)

// CPUBackends makes one CPU backend for each of ranks ranks, the threads shared among them
// (at least one each; threads < 1: all cores for each), closed when the test or benchmark
// ends.
func CPUBackends(t testing.TB, threads, ranks int) []backend.Backend {
	t.Helper()
	per := 0
	if threads > 0 {
		per = max(threads/ranks, 1)
	}
	bes := make([]backend.Backend, ranks)
	for i := range bes {
		b := cpubackend.New(per)
		t.Cleanup(func() { b.Close() })
		bes[i] = b
	}
	return bes
}

// MatMulRef returns y = x · wᵀ in float64: y[t][r] = sum_c x[t][c] * w[r][c] for n rows
// of x ([n][k]) and m rows of w ([m][k]).
func MatMulRef(x, w []float32, n, k, m int) []float64 {
	want := make([]float64, n*m)
	for t := range n {
		for r := range m {
			var s float64
			for c := range k {
				s += float64(x[t*k+c]) * float64(w[r*k+c])
			}
			want[t*m+r] = s
		}
	}
	return want
}

// RandomMasks returns masks for rows of vocab tokens: every third row unmasked, row 1
// allowing one token, the others about a quarter of the vocabulary.
func RandomMasks(r *rand.Rand, rows, vocab int) [][]uint32 {
	masks := make([][]uint32, rows)
	for i := range masks {
		if i%3 == 0 {
			continue
		}
		masks[i] = make([]uint32, backend.MaskWords(vocab))
		if i == 1 {
			tok := r.IntN(vocab)
			masks[i][tok/32] = 1 << (tok % 32)
			continue
		}
		for j := range masks[i] {
			masks[i][j] = r.Uint32() & r.Uint32()
		}
	}
	return masks
}

// Disallowed returns row with the tokens mask disallows set to -Inf.
func Disallowed(row []float32, mask []uint32) []float32 {
	row = slices.Clone(row)
	for i := range row {
		if !backend.Allowed(mask, i) {
			row[i] = float32(math.Inf(-1))
		}
	}
	return row
}
