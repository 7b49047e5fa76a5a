package model

import "github.com/kvasir-llm/kvasir/internal/backend"

// moe is the mixture-of-experts feed-forward of block l: each token goes to its top
// ExpertsUsed experts by router probability (renormalized over the chosen ones when
// NormTopKProbs), plus the sigmoid-gated shared expert when the model has one.
func (s *shard) moe(l int, a *activations) error {
	be, lw, c := s.be, &s.w.layers[l], s.cfg
	if err := be.MatMul(a.router, a.xb, lw.router); err != nil {
		return err
	}
	if err := be.RouteExperts(a.expertIDs, a.expertGains, a.router, c.NormTopKProbs); err != nil {
		return err
	}
	if err := be.ExpertMLP(a.ffnOut, a.xb, a.expertIDs, a.expertGains, s.experts[l]); err != nil {
		return err
	}
	if c.SharedExpertFFN == 0 {
		return nil
	}
	shared := &layerWeights[backend.Tensor]{gate: lw.shGate, up: lw.shUp, down: lw.shDown} // dense
	if err := s.mlp(a.shared, a.xb, a, shared); err != nil {
		return err
	}
	return be.GatedAdd(a.ffnOut, a.shared, a.xb, lw.shGateInp)
}
