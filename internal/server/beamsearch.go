package server

import (
	"math"

	"github.com/kvasir-llm/kvasir"
)

// DefaultLengthPenalty is length_penalty when a beam-search request gives none (vLLM's).
const DefaultLengthPenalty = 1

// beamSearchParams validates vLLM's use_beam_search and length_penalty and turns beam
// search on: n is the beam width, and the engine refuses the sampling settings that do not
// apply to it (stop strings, penalties, ...), naming them. Without beam search,
// length_penalty changes nothing, as in vLLM.
func (c *commonRequest) beamSearchParams(p *kvasir.SamplingParams) *APIError {
	penalty := float32(DefaultLengthPenalty)
	if c.LengthPenalty != nil {
		v := float32(*c.LengthPenalty)
		if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
			return badRequest("length_penalty", "length_penalty must be a finite number, got %v", *c.LengthPenalty)
		}
		penalty = v
	}
	if c.UseBeamSearch {
		p.UseBeamSearch, p.LengthPenalty = true, penalty
	}
	return nil
}
