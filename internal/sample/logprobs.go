package sample

import (
	"math"
	"slices"
)

// TokenLogprob is a token with its log probability.
type TokenLogprob struct {
	ID      int32
	Logprob float32
}

// LogSoftmaxAt returns the log probability of token id under softmax(logits), computed in
// float64 for stability; -Inf for an id out of range.
func LogSoftmaxAt(logits []float32, id int) float32 {
	if id < 0 || id >= len(logits) {
		return float32(math.Inf(-1))
	}
	return float32(float64(logits[id]) - logSumExp(logits))
}

// logSumExp returns log(sum(exp(logits))).
func logSumExp(logits []float32) float64 {
	m := math.Inf(-1)
	for _, v := range logits {
		m = max(m, float64(v))
	}
	if math.IsInf(m, -1) {
		return m
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - m)
	}
	return m + math.Log(sum)
}

// Logprobs returns the log probability of token id and the k most likely tokens (highest
// first, the lower id on ties) under softmax(logits).
func Logprobs(logits []float32, id, k int) (TokenLogprob, []TokenLogprob) {
	lse := logSumExp(logits)
	lp := func(i int) float32 { return float32(float64(logits[i]) - lse) }
	chosen := TokenLogprob{ID: int32(id), Logprob: float32(math.Inf(-1))}
	if id >= 0 && id < len(logits) {
		chosen.Logprob = lp(id)
	}
	k = min(k, len(logits))
	if k <= 0 {
		return chosen, nil
	}
	// Keep the k best in a small sorted slice: k is at most a few dozen.
	top := make([]TokenLogprob, 0, k+1)
	better := func(a, b TokenLogprob) bool {
		return a.Logprob > b.Logprob || (a.Logprob == b.Logprob && a.ID < b.ID)
	}
	for i, v := range logits {
		if len(top) == k && !(v > logits[top[k-1].ID] || (v == logits[top[k-1].ID] && int32(i) < top[k-1].ID)) {
			continue
		}
		e := TokenLogprob{ID: int32(i), Logprob: v} // raw logit for now, converted below
		at, _ := slices.BinarySearchFunc(top, e, func(a, b TokenLogprob) int {
			if better(a, b) {
				return -1
			}
			if better(b, a) {
				return 1
			}
			return 0
		})
		top = slices.Insert(top, at, e)
		if len(top) > k {
			top = top[:k]
		}
	}
	for i := range top {
		top[i].Logprob = lp(int(top[i].ID))
	}
	return chosen, top
}

// Rank returns token id's 1-based rank under logits: one more than the number of tokens
// with a strictly larger logit (ties share a rank), as vLLM reports it; 0 for an id out of
// range.
func Rank(logits []float32, id int) int {
	if id < 0 || id >= len(logits) {
		return 0
	}
	v, r := logits[id], 1
	for _, l := range logits {
		if l > v {
			r++
		}
	}
	return r
}
