package server

import (
	"net/http"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// This file serves llama-server's own endpoints: /completion (its native completion API,
// with its field names and its server-sent events, which end without [DONE]) and /props.

// llamaCompletionRequest is the body of POST /completion, in llama-server's names; the
// OpenAI names it shares (temperature, top_k, top_p, min_p, seed, stop, grammar,
// json_schema, ...) are read by the embedded commonRequest.
type llamaCompletionRequest struct {
	commonRequest
	Prompt        promptInput `json:"prompt"`
	NPredict      *int        `json:"n_predict"`
	RepeatPenalty *float64    `json:"repeat_penalty"`
	NProbs        int         `json:"n_probs"`
	CachePrompt   *bool       `json:"cache_prompt"`
	IDSlot        *int        `json:"id_slot"`
}

// llamaTimings are llama-server's timings of a completion.
type llamaTimings struct {
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

// llamaCompletion is a /completion answer, or one event of its stream.
type llamaCompletion struct {
	Content string  `json:"content"`
	Tokens  []int32 `json:"tokens"`
	Stop    bool    `json:"stop"`
	IDSlot  int     `json:"id_slot"`
	// The fields of the last event (and of a whole answer).
	Model           string        `json:"model,omitempty"`
	StopType        string        `json:"stop_type,omitempty"`
	StoppingWord    string        `json:"stopping_word,omitempty"`
	TokensPredicted int           `json:"tokens_predicted,omitempty"`
	TokensEvaluated int           `json:"tokens_evaluated,omitempty"`
	TokensCached    int           `json:"tokens_cached,omitempty"`
	Truncated       *bool         `json:"truncated,omitempty"`
	Timings         *llamaTimings `json:"timings,omitempty"`
}

// stopType is llama-server's name for how a completion stopped: eos, word (a stop string
// or token), limit (n_predict or the context).
func stopType(finish string, stop any) string {
	switch {
	case finish == kvasir.FinishLength:
		return "limit"
	case finish == kvasir.FinishStop && stop != nil:
		return "word"
	case finish == kvasir.FinishStop:
		return "eos"
	}
	return "none"
}

// handleLlamaCompletion answers POST /completion.
func (s *Server) handleLlamaCompletion(w http.ResponseWriter, r *http.Request) {
	req := llamaCompletionRequest{commonRequest: commonRequest{limits: &s.cfg.Limits}}
	if !s.readRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	cr := completionRequest{commonRequest: req.commonRequest, Prompt: req.Prompt, restOfContext: true}
	if req.NPredict != nil && *req.NPredict >= 0 {
		if *req.NPredict == 0 {
			writeError(w, badRequest("n_predict", "n_predict 0 asks for no tokens: give at least 1, or -1 for no limit"))
			return
		}
		cr.MaxTokens = req.NPredict
	}
	if req.RepeatPenalty != nil && cr.RepetitionPenalty == nil {
		cr.RepetitionPenalty = req.RepeatPenalty
	}
	if req.NProbs > 0 {
		cr.Logprobs = &req.NProbs
	}
	if len(cr.Prompt) > 1 {
		writeError(w, badRequest("prompt", "give one prompt (a string or token ids): /completion answers one"))
		return
	}
	reqs, apiErr := s.completionRequests(&cr)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	ctx, cancel := requestContext(r)
	defer cancel()
	start := time.Now()
	ch, apiErr := s.submit(ctx, newID("cmpl-"), reqs, "prompt")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	var first time.Time
	final := func(c *llamaCompletion, o kvasir.Output) {
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		u := o.Usage
		c.Stop, c.Model = true, s.modelName()
		c.StopType = stopType(o.FinishReason, o.StopReason)
		if word, ok := o.StopReason.(string); ok {
			c.StoppingWord = word
		}
		truncated := false
		c.TokensPredicted, c.TokensEvaluated, c.TokensCached, c.Truncated = u.CompletionTokens, u.PromptTokens, u.CachedPromptTokens, &truncated
		t := &llamaTimings{PromptN: u.PromptTokens - u.CachedPromptTokens, PromptMS: ms(first.Sub(start)),
			PredictedN: u.CompletionTokens, PredictedMS: ms(now.Sub(first))}
		if t.PromptN > 0 && t.PromptMS > 0 {
			t.PromptPerTokenMS, t.PromptPerSecond = t.PromptMS/float64(t.PromptN), 1000*float64(t.PromptN)/t.PromptMS
		}
		if t.PredictedN > 0 && t.PredictedMS > 0 {
			t.PredictedPerTokenMS, t.PredictedPerSecond = t.PredictedMS/float64(t.PredictedN), 1000*float64(t.PredictedN)/t.PredictedMS
		}
		c.Timings = t
	}
	if !req.Stream {
		var whole llamaCompletion
		whole.Tokens = []int32{}
		for it := range ch {
			o := it.Out
			if o.Err != nil {
				writeError(w, internalError(o.Err))
				return
			}
			if first.IsZero() && len(o.TokenIDs) > 0 {
				first = time.Now()
			}
			whole.Content += o.Text
			whole.Tokens = append(whole.Tokens, o.TokenIDs...)
			if o.FinishReason != "" {
				final(&whole, o)
			}
		}
		if !whole.Stop {
			return // the client went away
		}
		writeJSON(w, http.StatusOK, whole)
		return
	}
	sse := newSSE(w, int(s.cfg.MaxStreamBuffer))
	defer sse.close()
	for it := range ch {
		o := it.Out
		if o.Err != nil {
			sse.fail(internalError(o.Err))
			return
		}
		if first.IsZero() && len(o.TokenIDs) > 0 {
			first = time.Now()
		}
		ev := llamaCompletion{Content: o.Text, Tokens: o.TokenIDs}
		if ev.Tokens == nil {
			ev.Tokens = []int32{}
		}
		if o.FinishReason != "" {
			final(&ev, o)
		}
		if !sse.send(ev) || ev.Stop {
			return
		}
	}
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// handleProps answers GET /props as llama-server does: the default generation settings,
// the context, the chat template and the build.
func (s *Server) handleProps(w http.ResponseWriter, r *http.Request) {
	d := s.sampling
	tmpl := s.cfg.ChatTemplate
	if tmpl == "" {
		tmpl = s.eng.ChatTemplate()
	}
	var bos, eos string
	if tok := s.eng.Loaded().Tokenizer(); tok != nil {
		v := tok.Vocab()
		if v.BOS >= 0 {
			bos = s.eng.TokenText(int32(v.BOS))
		}
		if v.EOS >= 0 {
			eos = s.eng.TokenText(int32(v.EOS))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{
			"n_ctx": s.eng.MaxModelLen(),
			"params": map[string]any{
				"temperature": d.Temperature, "top_k": d.TopK, "top_p": d.TopP, "min_p": d.MinP,
				"repeat_penalty": d.RepetitionPenalty, "n_predict": -1,
			},
		},
		"model_path":    s.eng.Loaded().File().Path,
		"model_alias":   s.modelName(),
		"chat_template": tmpl,
		"bos_token":     bos,
		"eos_token":     eos,
		"modalities":    map[string]bool{"vision": false, "audio": false},
		"build_info":    "kvasir " + s.cfg.Version,
	})
}

// llamaRoutes registers llama-server's endpoints on mux.
func (s *Server) llamaRoutes(mux *http.ServeMux) {
	mux.Handle("/completion", method(http.MethodPost, s.handleLlamaCompletion))
	mux.Handle("/props", method(http.MethodGet, s.handleProps))
}

// isLlamaOrOllamaPath reports whether p is one of the llama-server or ollama endpoints that
// the API key protects.
func isLlamaOrOllamaPath(p string) bool {
	return strings.HasPrefix(p, "/api/") || p == "/completion"
}
