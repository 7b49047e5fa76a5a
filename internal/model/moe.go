package model

// moe computes the mixture-of-experts feed-forward of the n rows of s.xb into s.ffnOut.
// Each token goes to its top ExpertsUsed experts by softmax router probability
// (renormalized over the chosen ones when NormTopKProbs); the tokens routed to one expert
// are gathered and multiplied together, so each expert's weights are read once per step.
func (m *Model) moe(lw *layerWeights, n int) error {
	c := m.cfg
	s := &m.s
	dim := c.Dim
	if err := matMul(m.pool, s.router[:n*c.Experts], lw.router, s.xb, n); err != nil {
		return err
	}
	// Route: per expert, the tokens it serves and their weights.
	tokens := make([][]int, c.Experts)
	gains := make([][]float32, c.Experts)
	probs := make([]float64, c.Experts)
	for t := range n {
		for e, v := range s.router[t*c.Experts : (t+1)*c.Experts] {
			probs[e] = float64(v)
		}
		softmax64(probs)
		chosen := topExperts(probs, c.ExpertsUsed)
		var sum float64
		for _, e := range chosen {
			sum += probs[e]
		}
		for _, e := range chosen {
			g := probs[e]
			if c.NormTopKProbs {
				g /= sum
			}
			tokens[e] = append(tokens[e], t)
			gains[e] = append(gains[e], float32(g))
		}
	}
	out := s.ffnOut[:n*dim]
	clear(out)
	for e, toks := range tokens {
		if len(toks) == 0 {
			continue
		}
		k := len(toks)
		for j, t := range toks {
			copy(s.moeX[j*dim:(j+1)*dim], s.xb[t*dim:(t+1)*dim])
		}
		ew := lw.experts[e]
		if err := m.mlp(ew.gate, ew.up, ew.down, s.moeX[:k*dim], s.moeOut, k); err != nil {
			return err
		}
		for j, t := range toks {
			axpy(out[t*dim:(t+1)*dim], gains[e][j], s.moeOut[j*dim:(j+1)*dim])
		}
	}
	if lw.hasShared {
		if err := m.mlp(lw.shGate, lw.shUp, lw.shDown, s.xb, s.moeOut, n); err != nil {
			return err
		}
		for t := range n {
			x := s.xb[t*dim : (t+1)*dim]
			g := sigmoid(float32(dot64(lw.shGateInp, x)))
			axpy(out[t*dim:(t+1)*dim], g, s.moeOut[t*dim:(t+1)*dim])
		}
	}
	return nil
}

// axpy adds a*x to y.
func axpy(y []float32, a float32, x []float32) {
	for i, v := range x {
		y[i] += a * v
	}
}
