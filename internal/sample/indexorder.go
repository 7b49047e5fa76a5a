package sample

import (
	"math"
	"sort"
)

// DrawIndexOrder draws a token from logits as a device sampler does (one pass per
// restriction, no sorted candidate list): from softmax(logits / temp) restricted to the
// topK largest logits (topK <= 0 or >= the vocabulary: no limit), then to the most likely
// tokens whose probability first reaches topP (>= 1: no limit), ties at either cut kept; the
// token is the first, in token-id order, at which the running sum of kept probabilities
// reaches u times their total (u in [0, 1)). With topK 1 and u 0 it is the greedy choice.
// temp must be positive.
func DrawIndexOrder(logits []float32, temp float32, topK int, topP float32, u float64) int {
	n := len(logits)
	if n == 0 {
		return -1
	}
	// Tokens in descending order of logit, needed only to find the top-k and top-p cuts.
	var order []int
	limitK := topK > 0 && topK < n
	if limitK || topP < 1 {
		order = make([]int, n)
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return logits[order[a]] > logits[order[b]] })
	}
	top := logits[0]
	for _, l := range logits[1:] {
		top = max(top, l)
	}
	weights := make([]float64, n)
	for i, l := range logits {
		weights[i] = math.Exp((float64(l) - float64(top)) / float64(temp))
	}
	cut := float32(math.Inf(-1)) // kept: logits >= cut
	if limitK {
		cut = logits[order[topK-1]]
	}
	mass := func() float64 {
		var z float64
		for i, l := range logits {
			if l >= cut {
				z += weights[i]
			}
		}
		return z
	}
	if topP < 1 {
		target := float64(topP) * mass()
		var cum float64
		for _, i := range order {
			if logits[i] < cut {
				break
			}
			if cum += weights[i]; cum >= target {
				cut = logits[i]
				break
			}
		}
	}
	target := u * mass()
	var cum float64
	last := 0
	for i, l := range logits {
		if l < cut {
			continue
		}
		last = i
		if cum += weights[i]; cum >= target && cum > 0 {
			return i
		}
	}
	return last
}
