package model

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
