// Package backendtest holds what the tests of the CUDA kernels (package cuda) and of the
// GPU op set (package cudabackend) share: a float64 matrix-product reference and random
// vocabulary masks. Only tests import it.
package backendtest

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/kvasir-llm/kvasir/internal/backend"
)

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
