package sample

// Dist is a distribution over tokens: the candidates a sampler's processors leave, each with
// its probability (they sum to 1). Tokens not listed have probability 0.
type Dist struct {
	IDs []int32
	P   []float64
}

// Prob returns the probability of token id.
func (d Dist) Prob(id int32) float64 {
	for i, c := range d.IDs {
		if c == id {
			return d.P[i]
		}
	}
	return 0
}

// Draw returns the token at which the running sum of probabilities first exceeds u (u in
// [0, 1)), in the order the candidates are listed; -1 for an empty distribution.
func (d Dist) Draw(u float64) int32 {
	if len(d.IDs) == 0 {
		return -1
	}
	return d.IDs[Draw(d.P, u)]
}

// Dist returns the distribution Sample draws from for logits (which it does not modify):
// the candidates left after the sampler's processors with their probabilities, or, for a
// greedy sampler, the one token Sample would pick with probability 1. It draws nothing
// from the sampler's random source.
func (s *Sampler) Dist(logits []float32) Dist {
	if s.greedy && len(s.procs) == 0 {
		return Dist{IDs: []int32{int32(Greedy(logits))}, P: []float64{1}}
	}
	s.cand.Reset(logits)
	for _, p := range s.procs {
		p.Process(&s.cand)
	}
	if s.cand.Len() == 0 {
		return Dist{IDs: []int32{int32(Greedy(logits))}, P: []float64{1}}
	}
	if s.greedy {
		return Dist{IDs: []int32{s.cand.IDs[Greedy(s.cand.Logits)]}, P: []float64{1}}
	}
	return Dist{IDs: append([]int32(nil), s.cand.IDs...), P: s.cand.Probs()}
}

// Speculative decoding verifies draft tokens by modified rejection sampling (Leviathan et
// al. 2023; Chen et al. 2023): a draft token d drawn from the draft's distribution q is kept
// with probability min(1, p(d)/q(d)) under the target's distribution p, and when it is not,
// the token is drawn from the residual norm(max(0, p - q)). Either way the token is
// distributed exactly as p. A draft that is not drawn from a distribution (an n-gram lookup)
// is a point mass, q(d) = 1.

// KeepDraft reports whether draft token d, drawn from q, is kept under p, for the uniform
// draw u in [0, 1).
func KeepDraft(p, q Dist, d int32, u float64) bool {
	qd := q.Prob(d)
	if qd <= 0 {
		return false
	}
	return u < p.Prob(d)/qd
}

// Residual draws, with the uniform u in [0, 1), the token that replaces a rejected draft:
// from norm(max(0, p - q)); from p itself when that is empty (p and q equal, a case a
// rejection cannot reach but rounding can).
func Residual(p, q Dist, u float64) int32 {
	qp := make(map[int32]float64, len(q.IDs))
	for i, id := range q.IDs {
		qp[id] = q.P[i]
	}
	r := make([]float64, len(p.IDs))
	var sum float64
	for i, id := range p.IDs {
		r[i] = max(0, p.P[i]-qp[id])
		sum += r[i]
	}
	if sum <= 0 {
		return p.Draw(u)
	}
	for i := range r {
		r[i] /= sum
	}
	return p.IDs[Draw(r, u)]
}
