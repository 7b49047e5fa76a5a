package cpu

import (
	"fmt"
	"math"
)

// AttentionMass adds to mass, for each of one sequence's nTokens query tokens and each of
// its heads query heads, the probability with which that head of the token attends to
// context entry j (the softmax over j <= ctxIndex[t] of the scaled scores q·k_j, as
// Attention weighs the values), per KV head: mass holds kv.KVHeads rows of equal length,
// row g (entries [g·len/KVHeads, ...)) for KV head g, summing the query heads of its group.
// It is the attention mass that KV policies keeping the most attended tokens of each head
// (H2O, SnapKV) rank the cache by. Each row needs max(ctxIndex)+1 entries; q is laid out
// as for Attention. It runs on the calling goroutine: a policy asks for it only for the
// sequences it manages.
func AttentionMass(p *Pool, mass, q []float32, nTokens, heads int, kv *KVCacheLayer, blockTable, ctxIndex []int32, scale float32) error {
	if err := kv.check(); err != nil {
		return err
	}
	if heads <= 0 || heads%kv.KVHeads != 0 {
		return fmt.Errorf("cpu: attention mass: %d heads is not a multiple of %d kv heads", heads, kv.KVHeads)
	}
	maxPos, err := checkAttention(q, q, nTokens, heads, kv, blockTable, ctxIndex)
	if err != nil {
		return fmt.Errorf("cpu: attention mass: %w", err)
	}
	if nTokens == 0 {
		return nil
	}
	stride := len(mass) / kv.KVHeads
	if len(mass)%kv.KVHeads != 0 || stride <= maxPos {
		return fmt.Errorf("cpu: attention mass: %d entries for %d kv heads of a context of %d", len(mass), kv.KVHeads, maxPos+1)
	}
	a := attnJob{k: p.kern, q: q, nTokens: nTokens, heads: heads, kv: kv, blockTable: blockTable, ctxIndex: ctxIndex, scale: scale}
	hd, bs, group := kv.HeadDim, kv.BlockSize, heads/kv.KVHeads
	sc := make([]float32, maxPos+1)
	for t := range nTokens {
		n := int(ctxIndex[t]) + 1
		for h := range heads {
			qv := q[(t*heads+h)*hd:][:hd]
			for lb := 0; lb*bs < n; lb++ {
				a.scores(sc[lb*bs:min(n, (lb+1)*bs)], qv, int(blockTable[lb])*bs, h/group)
			}
			m := float32(math.Inf(-1))
			for j := range n {
				sc[j] *= scale
				m = max(m, sc[j])
			}
			var sum float64
			for j := range n {
				e := math.Exp(float64(sc[j] - m))
				sc[j] = float32(e)
				sum += e
			}
			inv := float32(1 / sum)
			row := mass[h/group*stride:][:n]
			for j := range n {
				row[j] += sc[j] * inv
			}
		}
	}
	return nil
}
