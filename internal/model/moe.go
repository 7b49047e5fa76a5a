package model

import "github.com/kvasir-llm/kvasir/internal/backend"

// moe is the mixture-of-experts feed-forward of block l: each token goes to its top
// ExpertsUsed experts by router probability (renormalized over the chosen ones when
// NormTopKProbs), their sum scaled by ExpertScale when set, plus the shared expert when
// the model has one: gated by a sigmoid (Qwen2-MoE) or added as it is (DeepSeek).
func (s *shard) moe(l int, a *activations) error {
	be, lw, c := s.be, &s.w.layers[l], s.cfg
	if err := be.MatMul(a.router, a.xb, lw.router); err != nil {
		return err
	}
	var err error
	if c.ExpertSigmoid {
		// Checked by New: the backend routes DeepSeek-V3's way.
		err = be.(backend.BiasedRouter).RouteExpertsBiased(a.expertIDs, a.expertGains, a.router, lw.expBias,
			c.ExpertGroups, c.ExpertGroupsUsed, c.NormTopKProbs)
	} else {
		err = be.RouteExperts(a.expertIDs, a.expertGains, a.router, c.NormTopKProbs)
	}
	if err != nil {
		return err
	}
	if err := be.ExpertMLP(a.ffnOut, a.xb, a.expertIDs, a.expertGains, s.experts[l]); err != nil {
		return err
	}
	if sc := c.ExpertScale; sc > 0 && sc != 1 {
		if err := be.Scale(a.ffnOut, float32(sc)); err != nil {
			return err
		}
	}
	if c.SharedExpertFFN == 0 {
		return nil
	}
	shared := &layerWeights[backend.Tensor]{gate: lw.shGate, up: lw.shUp, down: lw.shDown} // dense
	scratch := a
	if a.sharedGate != nil {
		sa := *a
		sa.gate, sa.up = a.sharedGate, a.sharedUp
		scratch = &sa
	}
	if err := s.mlp(a.shared, a.xb, scratch, shared); err != nil {
		return err
	}
	if !c.SharedExpertGated() {
		return be.Add(a.ffnOut, a.ffnOut, a.shared)
	}
	return be.GatedAdd(a.ffnOut, a.shared, a.xb, lw.shGateInp)
}
