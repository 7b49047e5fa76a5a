package server

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/kvasir-llm/kvasir"
)

// This file holds vLLM's prompt_logprobs: the request field, and the response's list with
// null for the first prompt token, then one object per prompt token keyed by token id.

// promptLogprobsParams validates prompt_logprobs and asks the engine for the prompt's
// logprobs with that many alternatives per position. As in vLLM they are not streamed, so a
// stream asking for them is refused rather than answered without them.
func (c *commonRequest) promptLogprobsParams(p *kvasir.SamplingParams) *APIError {
	if c.PromptLogprobs == nil {
		return nil
	}
	k := *c.PromptLogprobs
	if k < 0 || k > MaxTopLogprobs {
		return badRequest("prompt_logprobs", "prompt_logprobs must be in [0, %d], got %d", MaxTopLogprobs, k)
	}
	if c.Stream {
		return badRequest("prompt_logprobs", "prompt_logprobs are not available when stream is true (as in vLLM): send the request unstreamed")
	}
	p.PromptLogprobs, p.PromptTopLogprobs = true, k
	return nil
}

// promptLogprobs is the prompt_logprobs list of a response: nil (null) for the first prompt
// token, which nothing scores, then one position per prompt token.
type promptLogprobs []promptPosition

// promptPosition is one prompt token's entry: the token itself first, then its most likely
// alternatives, as a JSON object keyed by token id (vLLM's shape). A nil position is null.
type promptPosition []keyedLogprob

// keyedLogprob is one token of a promptPosition.
type keyedLogprob struct {
	id           int32
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// MarshalJSON writes the position as {"id": {"logprob", "rank", "decoded_token"}, ...} in
// its order, or null.
func (p promptPosition) MarshalJSON() ([]byte, error) {
	if p == nil {
		return []byte("null"), nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		v, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		b.WriteString(strconv.Quote(strconv.Itoa(int(e.id))))
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// promptLogprobs makes the prompt_logprobs list of a prompt from the engine's entries (entry
// i scores prompt token i+1), with at most top alternatives per position.
func (s *Server) promptLogprobs(lps []kvasir.Logprob, top int) promptLogprobs {
	out := make(promptLogprobs, 1, len(lps)+1)
	for _, lp := range lps {
		id := lp.Token.ID
		pos := promptPosition{{id: id, Logprob: finiteLogprob(lp.Token.Logprob), Rank: lp.Rank, DecodedToken: s.eng.TokenText(id)}}
		alts := topOf(lp, top)
		for i, t := range alts {
			if t.ID != id {
				pos = append(pos, keyedLogprob{id: t.ID, Logprob: finiteLogprob(t.Logprob), Rank: topRank(alts, i), DecodedToken: s.eng.TokenText(t.ID)})
			}
		}
		out = append(out, pos)
	}
	return out
}

// topOf returns at most k of lp's alternatives (the most likely first).
func topOf(lp kvasir.Logprob, k int) []kvasir.TokenLogprob {
	return lp.Top[:min(len(lp.Top), max(k, 0))]
}

// topRank is the vocabulary rank of alternative i of alts, the most likely tokens in order:
// 1 + the number of tokens more likely, all of which come before it (ties share a rank, as
// Logprob.Rank counts).
func topRank(alts []kvasir.TokenLogprob, i int) int {
	r := 1
	for _, t := range alts[:i] {
		if t.Logprob > alts[i].Logprob {
			r++
		}
	}
	return r
}
