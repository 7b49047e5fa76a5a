package prune

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Pattern is N:M semi-structured sparsity: in every group of M consecutive weights of a row
// (M consecutive input channels), at most N are nonzero. NVIDIA's sparse tensor cores run
// 2:4. The zero value is no pattern (unstructured sparsity).
type Pattern struct {
	N, M int
}

// IsZero reports whether p is no pattern.
func (p Pattern) IsZero() bool { return p.M == 0 }

// Sparsity is the fraction of weights the pattern sets to zero, 1 - N/M.
func (p Pattern) Sparsity() float64 { return 1 - float64(p.N)/float64(p.M) }

func (p Pattern) String() string { return fmt.Sprintf("%d:%d", p.N, p.M) }

// ParsePattern reads "N:M" with 0 < N < M <= 64 (2:4, 4:8, 1:4, ...).
func ParsePattern(s string) (Pattern, error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return Pattern{}, fmt.Errorf("pattern %q: want N:M, such as 2:4", s)
	}
	n, err1 := strconv.Atoi(a)
	m, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return Pattern{}, fmt.Errorf("pattern %q: want N:M with whole numbers, such as 2:4", s)
	}
	if n <= 0 || m <= n || m > 64 {
		return Pattern{}, fmt.Errorf("pattern %q: want 0 < N < M <= 64 (N of every M weights kept)", s)
	}
	return Pattern{N: n, M: m}, nil
}

// keepTopRow zeroes mask entries of the row's weights with the lowest scores: it leaves
// set the keep highest-scoring entries of score and clears the rest (ties broken by
// position, the earlier column kept).
func keepTopRow(score []float64, keep int, mask []bool) {
	idx := make([]int, len(score))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return score[idx[a]] > score[idx[b]] })
	for i := range mask {
		mask[i] = false
	}
	for _, i := range idx[:keep] {
		mask[i] = true
	}
}

// Mask returns which weights of a rows x cols matrix to keep given their scores (higher
// is more important), row by row as Wanda compares them: with a pattern, the N best of
// every group of M consecutive columns; otherwise the best round((1-sparsity)*cols) of each
// row.
func Mask(score []float64, rows, cols int, sparsity float64, pat Pattern) []bool {
	mask := make([]bool, rows*cols)
	for r := range rows {
		s, m := score[r*cols:(r+1)*cols], mask[r*cols:(r+1)*cols]
		if pat.IsZero() {
			keepTopRow(s, keepCount(cols, sparsity), m)
			continue
		}
		for g := 0; g < cols; g += pat.M {
			keepTopRow(s[g:g+pat.M], pat.N, m[g:g+pat.M])
		}
	}
	return mask
}

// keepCount is how many of n weights stay at the given sparsity.
func keepCount(n int, sparsity float64) int {
	pruned := int(float64(n)*sparsity + 0.5)
	return n - min(pruned, n)
}
