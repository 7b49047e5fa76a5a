package engine

// This file holds jump-forward: when a sequence's grammar (a sample.Forcer among its
// processors) forces the text that follows the token just sampled, those tokens are
// appended at once, without sampling, and the next step computes them all as one chunk
// with a sampling row only at its end, as a prompt chunk is computed: k forced tokens cost
// one forward pass instead of k. The forcer tokenizes the forced text as the tokenizer
// would, and may replace the token just sampled when it merges with the forced bytes; that
// token is never computed yet (a sampled token is computed by the step after), so the
// replacement needs no KV rollback, only the processors' (Rollback, then Accept).
//
// Under speculative decoding the jump applies after every token a verification accepts: when
// the grammar forces tokens after a kept draft, the drafts after it are rolled back like
// rejected ones (and the kept draft with them when the forced text replaces it), so the
// tokens are those of sampling token by token with a jump after each.
//
// With asynchronous scheduling the step after has been planned before the sampled token
// was known: it computes that token and samples after it. When a jump appended tokens, that
// sample would follow the wrong context, so the entry is marked stale at launch (its row is
// computed, its sample ignored) and the sequence's forced tokens are planned in the step
// after, while the stale step runs. A jump then costs that one wasted row.
//
// Jump-forward is off for requests that ask for logprobs (forced tokens have none to
// report) and with Config.DisableJumpForward.

// jump is what jump-forward does after a sequence's last accepted token: take back replace
// (0 or 1) tokens and append tokens.
type jump struct {
	replace int
	tokens  []int32
}

// jumpAfter asks seq's forcer which tokens its grammar forces after the tokens accepted so
// far, within max_tokens and the context length; the zero jump when none, or when
// jump-forward is off for the sequence.
func (e *Engine) jumpAfter(seq *sequence) jump {
	if e.cfg.DisableJumpForward || seq.forcer == nil || seq.status == statusFinished || seq.req.wantsLogprobs() {
		return jump{}
	}
	grow := min(seq.req.maxTokens-seq.numOutput(), seq.req.maxLen-len(seq.tokens))
	if grow <= 0 {
		return jump{}
	}
	replace, tokens := seq.forcer.JumpForward(grow)
	if len(tokens) == 0 || replace < 0 || replace > 1 {
		return jump{}
	}
	return jump{replace: replace, tokens: tokens}
}

// applyJump carries out j on seq, whose last accepted token is the last of picks: that
// token (and its pick) taken back when j replaces it, the forced tokens accepted. It
// returns the picks with the forced tokens' picks appended.
func (e *Engine) applyJump(seq *sequence, j jump, picks []pick) []pick {
	if len(j.tokens) == 0 {
		return picks
	}
	if j.replace > 0 {
		seq.tokens = seq.tokens[:len(seq.tokens)-1]
		for _, proc := range seq.procs {
			proc.Rollback(1)
		}
		picks = picks[:len(picks)-1]
	}
	e.mu.Lock()
	e.stats.ForcedTokens += int64(len(j.tokens))
	e.mu.Unlock()
	for _, tok := range j.tokens {
		p, ok := e.accept(seq, tok, nil)
		if !ok {
			break
		}
		picks = append(picks, p)
	}
	return picks
}

// markStale marks the sampling entries of a step being launched that no longer end at
// their sequence's last token (jump-forward appended tokens since the step was planned; see
// above): the step computes them without sampling, and the sequence no longer waits for
// their token.
func (e *Engine) markStale(job *stepJob) {
	for i := range job.plan.seqs {
		sc := &job.plan.seqs[i]
		seq := sc.seq
		// Planned, the entry ended at the sequence's length and added its pending token.
		if sc.sampling && seq.forcer != nil && seq.status != statusFinished && seq.length() != sc.start+sc.numNew+1 {
			sc.stale = true
			seq.pending--
		}
	}
}
