package server

import (
	"net/http"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// handleCompletions answers POST /v1/completions.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if !s.readRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	reqs, apiErr := s.completionRequests(&req)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	id := newID("cmpl-")
	ch, apiErr := s.submit(ctx, id, reqs, "prompt")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	n := max(reqs[0].Params.N, 1)
	echo := make([]string, len(reqs))
	if req.Echo {
		for i, p := range req.Prompt {
			echo[i] = p.Text
			if !p.IsText {
				echo[i], _ = s.eng.Detokenize(p.Tokens, !reqs[i].Params.KeepSpecialTokens)
			}
		}
	}
	lp := &legacyBuilder{s: s, top: -1}
	if req.Logprobs != nil {
		lp.top = *req.Logprobs
	}
	base := completionResponse{ID: id, Object: "text_completion", Created: time.Now().Unix(), Model: s.modelName()}
	if req.Stream {
		s.streamCompletion(w, ch, base, &req, n, len(reqs), echo, lp)
		return
	}
	res, apiErr := collect(ch, len(reqs), n)
	if apiErr != nil {
		s.log.Error("completion failed", "id", id, "err", apiErr.Message)
		writeError(w, apiErr)
		return
	}
	base.Choices = make([]completionChoice, len(res.choices))
	for i := range res.choices {
		cs := &res.choices[i]
		prefix := echo[i/n]
		text := prefix + cs.text.String()
		ch := completionChoice{Index: i, Text: text, FinishReason: strPtr(cs.finish), StopReason: cs.stop}
		if lp.top >= 0 {
			ch.Logprobs = lp.build(cs.tokens, cs.logprobs, len(prefix))
		}
		base.Choices[i] = ch
	}
	base.Usage = &res.usage
	writeJSON(w, http.StatusOK, base)
}

// completionRequests validates a completions request and makes one engine request per
// prompt.
func (s *Server) completionRequests(req *completionRequest) ([]kvasir.Request, *APIError) {
	if len(req.Prompt) == 0 {
		return nil, badRequest("prompt", "prompt is required")
	}
	if len(req.Prompt) > MaxPrompts {
		return nil, badRequest("prompt", "%d prompts: at most %d per request", len(req.Prompt), MaxPrompts)
	}
	if req.Suffix != nil && *req.Suffix != "" {
		return nil, unsupportedParam("suffix", "suffix is not supported yet (text after the insertion point)")
	}
	if apiErr := checkResponseFormat(req.ResponseFormat); apiErr != nil {
		return nil, apiErr
	}
	params, apiErr := req.params(req.MaxTokens, "max_tokens", DefaultCompletionMaxTokens, s.sampling)
	if apiErr != nil {
		return nil, apiErr
	}
	if req.BestOf != nil && *req.BestOf != max(params.N, 1) {
		return nil, unsupportedValue("best_of", "best_of other than n is not supported yet: every choice generated is returned")
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > MaxTopLogprobs {
			return nil, badRequest("logprobs", "logprobs must be in [0, %d], got %d", MaxTopLogprobs, *req.Logprobs)
		}
		params.Logprobs, params.TopLogprobs = true, *req.Logprobs
	}
	if !s.eng.HasTokenizer() {
		for _, p := range req.Prompt {
			if p.IsText {
				return nil, badRequest("prompt", "the model has no tokenizer: give the prompt as token ids")
			}
		}
	}
	reqs := make([]kvasir.Request, len(req.Prompt))
	for i, p := range req.Prompt {
		reqs[i] = kvasir.Request{Prompt: p.Text, PromptTokens: p.Tokens, Params: params, Priority: req.Priority, CacheSalt: req.CacheSalt}
	}
	return reqs, nil
}

// streamCompletion streams text_completion chunks.
func (s *Server) streamCompletion(w http.ResponseWriter, ch <-chan item, base completionResponse, req *completionRequest, n, prompts int, echo []string, lp *legacyBuilder) {
	sse := newSSE(w)
	u := usageTracker{last: make([]kvasir.Usage, prompts)}
	offsets := make([]int, prompts*n)
	chunk := func(c completionChoice) bool {
		out := base
		out.Choices = []completionChoice{c}
		if req.continuousUsage() {
			out.Usage = u.total()
		}
		return sse.send(out)
	}
	if req.Echo {
		for i := range offsets {
			offsets[i] = len(echo[i/n])
			if echo[i/n] != "" && !chunk(completionChoice{Index: i, Text: echo[i/n]}) {
				return
			}
		}
	}
	for it := range ch {
		o := it.Out
		u.update(it)
		if o.Err != nil {
			s.log.Error("completion failed mid-stream", "id", base.ID, "err", o.Err)
			sse.fail(internalError(o.Err))
			sse.done()
			return
		}
		if o.Text == "" && o.FinishReason == "" && len(o.Logprobs) == 0 {
			continue
		}
		idx := it.Prompt*n + o.Index
		c := completionChoice{Index: idx, Text: o.Text, FinishReason: strPtr(o.FinishReason), StopReason: stopReason(o)}
		if lp.top >= 0 {
			c.Logprobs = lp.build(o.TokenIDs, o.Logprobs, offsets[idx])
			for _, id := range o.TokenIDs {
				offsets[idx] += len(s.eng.TokenText(id))
			}
		}
		if !chunk(c) {
			return
		}
	}
	if req.includeUsage() {
		out := base
		out.Choices = []completionChoice{}
		out.Usage = u.total()
		sse.send(out)
	}
	sse.done()
}

// legacyBuilder makes the completions API's logprobs objects.
type legacyBuilder struct {
	s   *Server
	top int // alternatives per position; -1: no logprobs
}

// build lists tokens with their logprobs, top alternatives (the sampled token included, as
// vLLM does) and text offsets starting at offset.
func (b *legacyBuilder) build(ids []int32, lps []kvasir.Logprob, offset int) *legacyLogprobs {
	out := &legacyLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for i, id := range ids {
		text := b.s.eng.TokenText(id)
		out.Tokens = append(out.Tokens, text)
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(text)
		if i >= len(lps) {
			out.TokenLogprobs = append(out.TokenLogprobs, nil)
			out.TopLogprobs = append(out.TopLogprobs, nil)
			continue
		}
		v := finiteLogprob(lps[i].Token.Logprob)
		out.TokenLogprobs = append(out.TokenLogprobs, &v)
		top := make(map[string]float64, len(lps[i].Top)+1)
		for _, t := range lps[i].Top {
			tt := b.s.eng.TokenText(t.ID)
			if _, seen := top[tt]; !seen {
				top[tt] = finiteLogprob(t.Logprob)
			}
		}
		if b.top > 0 {
			top[text] = v
		}
		if b.top > 0 {
			out.TopLogprobs = append(out.TopLogprobs, top)
		} else {
			out.TopLogprobs = append(out.TopLogprobs, nil)
		}
	}
	return out
}
