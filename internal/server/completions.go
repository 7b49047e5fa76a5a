package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// handleCompletions answers POST /v1/completions.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	req := completionRequest{commonRequest: commonRequest{limits: &s.cfg.Limits}}
	if !s.readRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	if apiErr := s.compressCompletion(ctx, &req); apiErr != nil {
		writeError(w, apiErr)
		return
	}
	reqs, apiErr := s.completionRequests(&req)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	id := newID("cmpl-")
	ch, apiErr := s.submit(ctx, id, reqs, "prompt")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	n := max(reqs[0].Params.N, 1)
	e := s.echoOf(&req, reqs)
	lp := &legacyBuilder{s: s, top: -1}
	if req.Logprobs != nil {
		lp.top = *req.Logprobs
	}
	base := completionResponse{ID: id, Object: "text_completion", Created: time.Now().Unix(), Model: s.responseModel(reqs[0].Adapter)}
	if req.Stream {
		s.streamCompletion(w, ch, base, &req, n, e, lp)
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
		p := i / n
		ch := completionChoice{Index: i, Text: e.text[p] + cs.text.String(), FinishReason: strPtr(cs.finish), StopReason: cs.stop}
		if req.ReturnTokenIDs {
			ch.TokenIDs = cs.tokens
		}
		if lp.top >= 0 {
			ch.Logprobs = newLegacyLogprobs()
			offset := 0
			if e.logprobs {
				offset = lp.addPrompt(ch.Logprobs, res.promptTokens[p], res.promptLogprobs[p])
			}
			lp.add(ch.Logprobs, cs.tokens, cs.logprobs, offset)
		}
		if req.PromptLogprobs != nil {
			ch.PromptLogprobs = s.promptLogprobs(res.promptLogprobs[p], *req.PromptLogprobs)
		}
		base.Choices[i] = ch
	}
	base.Usage = &res.usage
	base.Usage.PromptCompression = req.compression
	writeJSON(w, http.StatusOK, base)
}

// echoed is what a completions request echoes of its prompts: each prompt's text, and
// whether with logprobs.
type echoed struct {
	text     []string
	logprobs bool
}

// echoOf returns what req echoes of the prompts of its engine requests reqs.
func (s *Server) echoOf(req *completionRequest, reqs []kvasir.Request) echoed {
	e := echoed{text: make([]string, len(reqs)), logprobs: req.Echo && req.Logprobs != nil}
	if !req.Echo {
		return e
	}
	for i, p := range req.Prompt {
		e.text[i] = p.Text
		if !p.IsText {
			e.text[i], _ = s.eng.Detokenize(p.Tokens, !reqs[i].Params.KeepSpecialTokens)
		}
	}
	return e
}

// completionRequests validates a completions request and makes one engine request per
// prompt.
func (s *Server) completionRequests(req *completionRequest) ([]kvasir.Request, *APIError) {
	if len(req.Prompt) == 0 {
		return nil, badRequest("prompt", "prompt is required")
	}
	if len(req.Prompt) > MaxPrompts {
		return nil, tooManyPrompts(len(req.Prompt))
	}
	if req.Suffix != nil && *req.Suffix != "" {
		return nil, unsupportedParam("suffix", "suffix is not supported yet (text after the insertion point)")
	}
	defaultMax := DefaultCompletionMaxTokens
	if req.restOfContext {
		defaultMax = 0
	}
	params, apiErr := req.params(req.MaxTokens, "max_tokens", defaultMax, s.sampling)
	if apiErr != nil {
		return nil, apiErr
	}
	adapter, apiErr := s.adapterOf(req.Model)
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
	for _, apiErr := range []*APIError{req.promptLogprobsParams(&params), req.beamSearchParams(&params)} {
		if apiErr != nil {
			return nil, apiErr
		}
	}
	if req.Echo && req.Logprobs != nil {
		// The echoed prompt tokens carry their logprobs (as in vLLM): the engine scores the
		// prompt with as many alternatives as either field asks for.
		if params.UseBeamSearch {
			return nil, badRequest("echo", "echo with logprobs is not supported with beam search (use_beam_search): it needs the prompt's logprobs, which beam search does not compute")
		}
		params.PromptLogprobs, params.PromptTopLogprobs = true, max(params.PromptTopLogprobs, *req.Logprobs)
	}
	if apiErr := s.cfg.checkRequest(params.Stop, len(req.Prompt), params); apiErr != nil {
		return nil, apiErr
	}
	n := max(params.N, 1)
	var lps logprobCount
	lps.generated(params, len(req.Prompt)*n, params.MaxTokens, s.eng.MaxModelLen())
	if apiErr := s.cfg.checkLogprobs(lps, logprobsParam(params)); apiErr != nil {
		return nil, apiErr
	}
	prompts, apiErr := s.promptTokens(req.Prompt)
	if apiErr != nil {
		return nil, apiErr
	}
	for _, ids := range prompts {
		if req.PromptLogprobs != nil {
			lps.add(n, len(ids), *req.PromptLogprobs)
		}
		if req.Echo && req.Logprobs != nil {
			lps.add(n, len(ids), *req.Logprobs)
		}
	}
	if apiErr := s.cfg.checkLogprobs(lps, logprobsParam(params)); apiErr != nil {
		return nil, apiErr
	}
	procs, apiErr := s.constrain(&req.constraintFields)
	if apiErr != nil {
		return nil, apiErr
	}
	reqs := make([]kvasir.Request, len(req.Prompt))
	for i, ids := range prompts {
		reqs[i] = kvasir.Request{PromptTokens: ids, Params: params, Priority: req.Priority, CacheSalt: req.CacheSalt, Processors: procs, KVPolicy: req.KVPolicy.request(),
			Adapter: adapter}
		// Each prompt's output has a processor of its own, in the same (fresh) state.
		procs = cloneProcessors(procs)
	}
	return reqs, nil
}

// promptTokens returns the tokens of every prompt: text prompts no longer than
// MaxPromptBytes are tokenized (precheck refuses longer ones before decoding; this is the
// check of record), and one that cannot fit the context is refused as soon as its tokens
// pass the context length.
func (s *Server) promptTokens(prompts promptInput) ([][]int32, *APIError) {
	out := make([][]int32, len(prompts))
	for i, p := range prompts {
		if !p.IsText {
			out[i] = p.Tokens
			continue
		}
		if !s.eng.HasTokenizer() {
			return nil, badRequest("prompt", "the model has no tokenizer: give the prompt as token ids")
		}
		what := "the prompt"
		if len(prompts) > 1 {
			what = fmt.Sprintf("prompt %d", i)
		}
		if apiErr := s.cfg.checkPromptBytes("prompt", what, len(p.Text)); apiErr != nil {
			return nil, apiErr
		}
		ids, err := s.eng.TokenizePrompt(p.Text)
		if err != nil {
			return nil, engineError(err, "prompt")
		}
		out[i] = ids
	}
	return out, nil
}

// streamCompletion streams text_completion chunks. With echo, each choice starts with a
// chunk of its prompt; with logprobs too, that chunk carries the prompt tokens' logprobs,
// which arrive on the first output of the prompt's choice 0, so until then the prompt's
// other outputs wait.
func (s *Server) streamCompletion(w http.ResponseWriter, ch <-chan item, base completionResponse, req *completionRequest, n int, e echoed, lp *legacyBuilder) {
	sse := newSSE(w, int(s.cfg.MaxStreamBuffer))
	defer sse.close()
	prompts := len(e.text)
	u := usageTracker{last: make([]kvasir.Usage, prompts), compression: req.compression}
	offsets := make([]int, prompts*n)
	chunk := func(c completionChoice) bool {
		out := base
		out.Choices = []completionChoice{c}
		if req.continuousUsage() {
			out.Usage = u.total()
		}
		return sse.send(out)
	}
	echo := func(p int, prompt []int32, plps []kvasir.Logprob) bool {
		for i := p * n; i < (p+1)*n; i++ {
			c := completionChoice{Index: i, Text: e.text[p]}
			if e.logprobs {
				c.Logprobs = newLegacyLogprobs()
				offsets[i] = lp.addPrompt(c.Logprobs, prompt, plps)
			} else if c.Text == "" {
				continue
			}
			if !chunk(c) {
				return false
			}
		}
		return true
	}
	send := func(o kvasir.Output, p int) bool {
		if o.Text == "" && o.FinishReason == "" && len(o.Logprobs) == 0 && (!req.ReturnTokenIDs || len(o.TokenIDs) == 0) {
			return true
		}
		idx := p*n + o.Index
		c := completionChoice{Index: idx, Text: o.Text, FinishReason: strPtr(o.FinishReason), StopReason: stopReason(o)}
		if req.ReturnTokenIDs {
			c.TokenIDs = o.TokenIDs
		}
		if lp.top >= 0 {
			c.Logprobs = newLegacyLogprobs()
			offsets[idx] = lp.add(c.Logprobs, o.TokenIDs, o.Logprobs, offsets[idx])
		}
		return chunk(c)
	}
	if req.Echo && !e.logprobs {
		for p := range prompts {
			if !echo(p, nil, nil) {
				return
			}
		}
	}
	echoedAt := make([]bool, prompts)
	held := make([][]kvasir.Output, prompts)
	for it := range ch {
		o, p := it.Out, it.Prompt
		u.update(it)
		if o.Err != nil {
			s.log.Error("completion failed mid-stream", "id", base.ID, "err", o.Err)
			sse.fail(internalError(o.Err))
			sse.done()
			return
		}
		if e.logprobs && !echoedAt[p] {
			if o.Index != 0 {
				held[p] = append(held[p], o)
				continue
			}
			echoedAt[p] = true
			if !echo(p, o.PromptTokenIDs, o.PromptLogprobs) {
				return
			}
			for _, h := range held[p] {
				if !send(h, p) {
					return
				}
			}
			held[p] = nil
		}
		if !send(o, p) {
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

// newLegacyLogprobs returns an empty logprobs object (empty lists, not null).
func newLegacyLogprobs() *legacyLogprobs {
	return &legacyLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
}

// add appends tokens with their logprobs (entry i for token i; null past the entries), top
// alternatives (the token itself included, as vLLM does) and text offsets from offset on.
// It returns the offset after the last token.
func (b *legacyBuilder) add(out *legacyLogprobs, ids []int32, lps []kvasir.Logprob, offset int) int {
	for i, id := range ids {
		var lp *kvasir.Logprob
		if i < len(lps) {
			lp = &lps[i]
		}
		offset = b.addToken(out, id, lp, offset)
	}
	return offset
}

// addPrompt appends an echoed prompt from its tokens (as the engine tokenized it) and its
// prompt logprobs (the entry of every token after the first, whose logprob and
// alternatives are null). Offsets start at 0; it returns the offset after the prompt.
func (b *legacyBuilder) addPrompt(out *legacyLogprobs, prompt []int32, plps []kvasir.Logprob) int {
	if len(prompt) == 0 {
		return 0
	}
	offset := b.addToken(out, prompt[0], nil, 0)
	for i := range plps {
		lp := plps[i]
		lp.Top = topOf(lp, b.top)
		offset = b.addToken(out, lp.Token.ID, &lp, offset)
	}
	return offset
}

// addToken appends one token at offset with its logprob entry (nil: null) and returns the
// offset after it.
func (b *legacyBuilder) addToken(out *legacyLogprobs, id int32, lp *kvasir.Logprob, offset int) int {
	text := b.s.eng.TokenText(id)
	out.Tokens = append(out.Tokens, text)
	out.TextOffset = append(out.TextOffset, offset)
	if lp == nil {
		out.TokenLogprobs = append(out.TokenLogprobs, nil)
		out.TopLogprobs = append(out.TopLogprobs, nil)
		return offset + len(text)
	}
	v := finiteLogprob(lp.Token.Logprob)
	out.TokenLogprobs = append(out.TokenLogprobs, &v)
	if b.top <= 0 {
		out.TopLogprobs = append(out.TopLogprobs, nil)
		return offset + len(text)
	}
	top := make(map[string]float64, len(lp.Top)+1)
	for _, t := range lp.Top {
		tt := b.s.eng.TokenText(t.ID)
		if _, seen := top[tt]; !seen {
			top[tt] = finiteLogprob(t.Logprob)
		}
	}
	top[text] = v
	out.TopLogprobs = append(out.TopLogprobs, top)
	return offset + len(text)
}

// cloneProcessors returns independent copies of procs (nil for none).
func cloneProcessors(procs []kvasir.Processor) []kvasir.Processor {
	var out []kvasir.Processor
	for _, p := range procs {
		out = append(out, p.Clone())
	}
	return out
}
