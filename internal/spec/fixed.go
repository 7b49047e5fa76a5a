package spec

import "github.com/kvasir-llm/kvasir/internal/engine"

// Fixed is the engine.SpecPolicy of "dynamic": false: every candidate drafts K tokens, or
// as many as it may take when that is fewer. It learns nothing.
type Fixed struct {
	// K is the draft length of every candidate.
	K int
}

// DraftLens sets every candidate's draft length to min(K, its MaxLen).
func (f Fixed) DraftLens(_ int, cands []engine.SpecCandidate, lens []int) {
	for i, c := range cands {
		lens[i] = max(0, min(f.K, c.MaxLen))
	}
}

// Verified does nothing: a fixed policy does not learn.
func (Fixed) Verified(string, int, int) {}

// Done does nothing.
func (Fixed) Done(string) {}

// Stepped does nothing.
func (Fixed) Stepped(engine.StepCost) {}
