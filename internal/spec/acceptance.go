package spec

// tally is a running count of draft-token verdicts with exponential forgetting: each
// verification of n drafts that kept j is j accepted tokens and, when j < n, one rejected
// token (the tokens after the first rejection are never judged). Under the model that each
// draft token is accepted with the same probability a, given the ones before it were,
// accepted / (accepted + rejected) estimates a.
type tally struct {
	accepted, rejected float64
}

// add counts a verification of n drafts that kept kept, after scaling the earlier counts
// by decay (0..1: how much of the past to keep).
func (t *tally) add(n, kept int, decay float64) {
	t.accepted *= decay
	t.rejected *= decay
	t.accepted += float64(kept)
	if kept < n {
		t.rejected++
	}
}

// rate estimates the per-token acceptance rate with a prior of weight pseudo-verdicts at
// rate prior: the prior holds while the counts are few and fades as they grow.
func (t tally) rate(prior, weight float64) float64 {
	r := (t.accepted + weight*prior) / (t.accepted + t.rejected + weight)
	return min(max(r, 0), maxRate)
}

// maxRate caps an acceptance estimate, so that expected lengths stay finite and a
// sequence that has never missed still weighs the cost of one more draft.
const maxRate = 0.995

// expectedTokens returns the tokens a verification of k drafts yields on average when each
// draft is accepted with probability a given the ones before: the accepted drafts plus the
// one token the target samples after them, 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a).
func expectedTokens(a float64, k int) float64 {
	sum, term := 1.0, 1.0
	for range k {
		term *= a
		sum += term
	}
	return sum
}
