package engine

// Proposer guesses the tokens that follow a sequence, so that the model can check several
// of them in one step (speculative decoding). The engine asks it, on the loop, while it
// plans a step, for each sequence that decodes; the step then computes the sequence's last
// token and the drafts with a logits row each, and the engine keeps the drafts the
// sequence's own sampling agrees with (see accept.go). A proposer that guesses wrong costs
// only the drafts' compute; the tokens generated are the same as without it.
type Proposer interface {
	// Propose returns at most max tokens that may follow tokens (the sequence's prompt and
	// output so far; read only, not kept). Fewer, or none, is always fine.
	Propose(tokens []int32, max int) []int32
}
