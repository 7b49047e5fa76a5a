package engine

import (
	"fmt"
	"time"

	"github.com/kvasir-llm/kvasir/internal/model"
)

// MaxSpeculativeTokens is the most draft tokens a sequence may verify in one step.
const MaxSpeculativeTokens = 16

// Speculation configures speculative decoding (Config.Speculation): each decoding sequence
// may verify up to K draft tokens per step, proposed by exactly one of Proposer (from the
// sequence's own tokens, on the engine loop: n-gram lookup), DraftModel (a smaller model
// with the target's vocabulary) or DraftLayers (the target's first layers as its own
// draft). The tokens kept follow the target's distribution exactly (accept.go).
type Speculation struct {
	// K is the most draft tokens per sequence per step, 1..MaxSpeculativeTokens.
	K int
	// Proposer proposes point-mass drafts from a sequence's tokens.
	Proposer Proposer
	// DraftModel proposes by decoding K tokens ahead with a model of its own, on the
	// target's device. The engine gives it a KV cache with the target's block numbering:
	// a sequence's blocks hold both models' keys and values, allocated, shared, copied,
	// preempted and freed together.
	DraftModel *model.Model
	// DraftLayers, when positive, proposes with the target's first DraftLayers layers, its
	// final norm and its output head (self-speculation): no extra weights, and the draft's
	// keys and values are the target's own for those layers.
	DraftLayers int
	// Policy chooses each step's draft lengths (dynamic speculation); nil drafts K for
	// every sequence that can.
	Policy SpecPolicy
}

// SpecPolicy chooses how many draft tokens each sequence verifies in a step and learns
// from what happens. The engine calls it on the loop.
type SpecPolicy interface {
	// DraftLens is called while a step is planned. cands are the decoding sequences that
	// may draft (each brings its last token to the step besides its drafts); others is the
	// number of the step's other tokens (prefill chunks, and decodes that cannot draft). It
	// sets lens[i], 0..MaxLen, for candidate i; the engine cuts what the step's budget
	// cannot hold.
	DraftLens(others int, cands []SpecCandidate, lens []int)
	// Verified reports one verification: the sequence drafted n tokens, kept kept of them.
	// A proposer's empty proposal for a sequence given drafts is reported as one draft
	// token, none kept: a draft the policy asked for that yields nothing.
	Verified(seq string, n, kept int)
	// Done forgets a finished sequence.
	Done(seq string)
	// Stepped reports the cost of a finished step.
	Stepped(c StepCost)
}

// SpecCandidate is a sequence that may draft in the step being planned.
type SpecCandidate struct {
	// Seq names the sequence (the same name in Verified and Done).
	Seq string
	// MaxLen is the most draft tokens it may take (max_tokens, the context length and the
	// step's budget left).
	MaxLen int
	// Lag is the number of tokens the draft model would catch up on before drafting (its
	// first pass): the sequence's tokens its cache does not hold yet, the whole prompt
	// after a prefill; 1 when the draft reads the target's cache; 0 with a proposer.
	Lag int
	// Left is the most tokens it may still produce (max_tokens and the context length);
	// 0 when unknown.
	Left int
	// SitsOut says that drafting in this step costs the sequence this step: a step
	// decoding it is in flight, so its last token is not known yet, and given drafts it
	// sits this step out and verifies them in the next. A sequence that verified in the
	// step before (the engine finishes such a step before it plans the next) or that has
	// just been admitted drafts at once.
	SitsOut bool
}

// StepCost is what a step cost: its target forward pass over Tokens tokens (VerifyTokens
// of them draft tokens verified), and its draft phase, DraftPasses forward passes of the
// draft model over DraftTokens tokens in all, catch-up tokens included (none with a
// Proposer).
type StepCost struct {
	Tokens, VerifyTokens     int
	Target                   time.Duration
	DraftPasses, DraftTokens int
	Draft                    time.Duration
}

// check validates the configuration against the target's layer count.
func (s *Speculation) check(layers int) error {
	if s == nil {
		return nil
	}
	n := 0
	for _, set := range []bool{s.Proposer != nil, s.DraftModel != nil, s.DraftLayers != 0} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return fmt.Errorf("engine: speculation needs exactly one proposer, draft model or draft layer count (%d given)", n)
	case s.K < 1 || s.K > MaxSpeculativeTokens:
		return fmt.Errorf("engine: %d speculative tokens: want 1..%d", s.K, MaxSpeculativeTokens)
	case s.DraftLayers < 0 || s.DraftLayers >= layers && s.DraftModel == nil && s.Proposer == nil:
		return fmt.Errorf("engine: %d draft layers: want 1..%d (fewer than the target's %d)", s.DraftLayers, layers-1, layers)
	}
	return nil
}

// policy returns the configured policy (nil without speculation or without a policy).
func (s *Speculation) policy() SpecPolicy {
	if s == nil {
		return nil
	}
	return s.Policy
}
