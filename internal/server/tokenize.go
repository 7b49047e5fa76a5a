package server

import (
	"net/http"
)

// handleTokenize answers vLLM's POST /tokenize: a prompt, or chat messages rendered with
// the template, to token ids.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	req := tokenizeRequest{limits: &s.cfg.Limits}
	if !s.readRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	if !s.eng.HasTokenizer() {
		writeError(w, badRequest("", "the model has no tokenizer"))
		return
	}
	var ids []int32
	switch {
	case req.Prompt != nil && req.Messages != nil:
		writeError(w, badRequest("prompt", "give either prompt or messages, not both"))
		return
	case req.Prompt != nil:
		if apiErr := s.cfg.checkPromptBytes("prompt", "the prompt", len(*req.Prompt)); apiErr != nil {
			writeError(w, apiErr)
			return
		}
		addSpecial := req.AddSpecialTokens == nil || *req.AddSpecialTokens
		var err error
		if ids, err = s.eng.Tokenize(*req.Prompt, addSpecial); err != nil {
			writeError(w, badRequest("prompt", "%v", err))
			return
		}
	case req.Messages != nil:
		if req.AddSpecialTokens != nil {
			writeError(w, unsupportedParam("add_special_tokens", "add_special_tokens with messages is not supported yet: messages are tokenized as a chat completion's prompt is (a BOS added once where the model adds one)"))
			return
		}
		if apiErr := checkContinueFinal(req.AddGenerationPrompt, req.ContinueFinal); apiErr != nil {
			writeError(w, apiErr)
			return
		}
		addGen := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
		var apiErr *APIError
		if ids, apiErr = s.renderChat(r.Context(), req.Messages, req.Tools, addGen, req.ContinueFinal, req.ChatTemplateKwargs); apiErr != nil {
			writeError(w, apiErr)
			return
		}
	default:
		writeError(w, badRequest("prompt", "give a prompt or messages"))
		return
	}
	res := struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []int32  `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}{Count: len(ids), MaxModelLen: s.eng.MaxModelLen(), Tokens: ids}
	if res.Tokens == nil {
		res.Tokens = []int32{}
	}
	if req.ReturnTokenStrs {
		res.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			res.TokenStrs[i] = s.eng.TokenText(id)
		}
	}
	writeJSON(w, http.StatusOK, res)
}

// handleDetokenize answers vLLM's POST /detokenize: token ids to text.
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if !s.readRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	if req.Tokens == nil {
		writeError(w, badRequest("tokens", "tokens is required"))
		return
	}
	vocab := s.eng.VocabSize()
	for i, id := range req.Tokens {
		if id < 0 || int(id) >= vocab {
			writeError(w, badRequest("tokens", "tokens[%d] = %d is outside the vocabulary of %d", i, id, vocab))
			return
		}
	}
	text, err := s.eng.Detokenize(req.Tokens, false)
	if err != nil {
		writeError(w, badRequest("tokens", "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": text})
}
