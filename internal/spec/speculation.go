package spec

import (
	"github.com/kvasir-llm/kvasir/internal/engine"
	"github.com/kvasir-llm/kvasir/internal/model"
)

// Speculation returns the engine's speculative-decoding settings for a checked
// configuration: K, the proposer (the custom one, or the n-gram proposer), the draft model
// (draft_model: draft, which the caller loaded from Model) or the draft layer count
// (layer_skip), and the policy (Policy).
func (c Config) Speculation(draft *model.Model) *engine.Speculation {
	s := &engine.Speculation{K: c.NumSpeculativeTokens, Policy: c.Policy()}
	switch {
	case c.Proposer != nil:
		s.Proposer = c.Proposer
	case c.Method == MethodNGram:
		s.Proposer = NGram{Min: c.PromptLookupMin, Max: c.PromptLookupMax}
	case c.Method == MethodDraftModel:
		s.DraftModel = draft
	case c.Method == MethodLayerSkip:
		s.DraftLayers = c.DraftLayers
	}
	return s
}

// Policy returns a new policy for the configuration: a Fixed one of K when DisableDynamic,
// else a Dynamic one (whose drafts catch up on the tokens they missed with draft_model).
func (c Config) Policy() engine.SpecPolicy {
	if c.DisableDynamic {
		return Fixed{K: c.NumSpeculativeTokens}
	}
	return NewDynamic(DynamicConfig{MaxLen: c.NumSpeculativeTokens, CatchUp: c.Method == MethodDraftModel && c.Proposer == nil})
}
