package model

import "github.com/kvasir-llm/kvasir/internal/backend"

// OLMo 2's block has no norm before attention or the MLP: each half reads the residual
// stream itself and its output is normalized (the post-norms) before it is added back;
// q and k are normalized over the whole projection (Config.QKNormFull) before rotary
// embedding. Without a pre-norm to fuse the residual add into, the pending half-block
// output joins the stream with Add.

// joinResidual adds the pending half-block output a.ffnOut into the residual stream a.x,
// the next half's input (unless first: the embedding has no output pending).
func (s *shard) joinResidual(a *activations, first bool) error {
	if first {
		return nil
	}
	return s.be.Add(a.x, a.x, a.ffnOut)
}

// splitQKNorm is OLMo 2's QK norm on a tensor-parallel rank, which holds some of the heads:
// each of q and k has its rows' squares summed on every rank, the sums all-reduced, and
// the rank's part normalized by the whole rows' RMS. Every rank's part is the same width,
// so a whole row is the part's times the ranks (with fewer KV heads than ranks, each head
// is held by as many ranks as it is counted in the sum).
func (s *shard) splitQKNorm(a *activations, lw *layerWeights[backend.Tensor]) error {
	ranks, eps := s.tp.Size(), float32(s.cfg.NormEps)
	for _, p := range []struct{ x, sq, w backend.Tensor }{{a.q, a.qSq, lw.qNorm}, {a.k, a.kSq, lw.kNorm}} {
		if err := s.be.SumSquares(p.sq, p.x); err != nil {
			return err
		}
		if err := s.reduce(p.sq); err != nil {
			return err
		}
		cols := p.x.Shape()[len(p.x.Shape())-1]
		if err := s.be.RMSNormSplit(p.x, p.sq, p.w, cols*ranks, eps); err != nil {
			return err
		}
	}
	return nil
}
