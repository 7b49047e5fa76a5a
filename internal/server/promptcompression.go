package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/promptcompress"
)

// Prompt compression (issue 23): a request's prompt_compression {"rate": r, "model": NAME}
// shortens its prompt to about r of its tokens before the engine sees it, judged by a small
// model's surprisal (package promptcompress): the served model itself, or one of
// Config.CompressionModels. Instructions (system and developer messages) and the question
// (the last sentence of the prompt, or of the last user message) are kept whole. The
// response's usage.prompt_compression reports the target's tokens before and after.

// promptCompressionField is a request's prompt_compression.
type promptCompressionField struct {
	Rate  *float64 `json:"rate"`
	Model string   `json:"model"`
}

// UnmarshalJSON reads the object, refusing unknown keys.
func (f *promptCompressionField) UnmarshalJSON(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	type plain promptCompressionField
	var p plain
	if err := d.Decode(&p); err != nil {
		return &fieldError{"prompt_compression", `expected an object {"rate": a number in (0, 1], "model": a model name}: ` + err.Error()}
	}
	*f = promptCompressionField(p)
	return nil
}

// compressionUsage is usage.prompt_compression: the prompt's tokens (the served model's)
// before compression and after (the latter is also prompt_tokens).
type compressionUsage struct {
	OriginalTokens int `json:"original_tokens"`
	KeptTokens     int `json:"kept_tokens"`
}

// compressor checks a prompt_compression and returns its scorer and rate.
func (s *Server) compressor(f *promptCompressionField) (promptcompress.Scorer, float64, *APIError) {
	if f.Rate == nil {
		return nil, 0, badRequest("prompt_compression.rate", "prompt_compression needs a rate: the fraction of the prompt's tokens to keep, in (0, 1]")
	}
	if err := promptcompress.CheckRate(*f.Rate); err != nil {
		return nil, 0, badRequest("prompt_compression.rate", "prompt_compression.rate: %v", err)
	}
	if f.Model == "" || slices.Contains(s.cfg.ModelNames, f.Model) {
		return promptcompress.EngineScorer{Engine: s.eng}, *f.Rate, nil
	}
	if e, ok := s.cfg.CompressionModels[f.Model]; ok {
		return promptcompress.EngineScorer{Engine: e}, *f.Rate, nil
	}
	have := append(slices.Clone(s.cfg.ModelNames), slices.Sorted(maps.Keys(s.cfg.CompressionModels))...)
	return nil, 0, badRequest("prompt_compression.model", "prompt_compression.model %q: unknown compression model (this server has %s)", f.Model, strings.Join(have, ", "))
}

// compressParts compresses parts, mapping errors to the API's.
func compressParts(ctx context.Context, sc promptcompress.Scorer, parts []promptcompress.Part, rate float64) (promptcompress.Result, *APIError) {
	res, err := promptcompress.Compress(ctx, sc, parts, rate)
	if err != nil {
		if errors.Is(err, kvasir.ErrTooLong) || errors.Is(err, kvasir.ErrQueueFull) {
			return res, engineError(err, "prompt_compression")
		}
		return res, internalError(err)
	}
	return res, nil
}

// compressCompletion compresses every prompt of a completions request that asks for it,
// in place, and records the token counts for its usage.
func (s *Server) compressCompletion(ctx context.Context, req *completionRequest) *APIError {
	if req.PromptCompression == nil {
		return nil
	}
	sc, rate, apiErr := s.compressor(req.PromptCompression)
	if apiErr != nil {
		return apiErr
	}
	if !s.eng.HasTokenizer() {
		return badRequest("prompt_compression", "prompt_compression needs a text prompt: the model has no tokenizer")
	}
	u := &compressionUsage{}
	for i, p := range req.Prompt {
		if !p.IsText {
			return badRequest("prompt_compression", "prompt_compression needs text prompts: prompt %d is token ids", i)
		}
		if apiErr := s.cfg.checkPromptBytes("prompt", "the prompt", len(p.Text)); apiErr != nil {
			return apiErr
		}
		res, apiErr := compressParts(ctx, sc, promptcompress.QuestionParts(p.Text), rate)
		if apiErr != nil {
			return apiErr
		}
		before, _ := s.eng.Tokenize(p.Text, true)
		after, _ := s.eng.Tokenize(res.Text(), true)
		u.OriginalTokens += len(before)
		u.KeptTokens += len(after)
		req.Prompt[i].Text = res.Text()
	}
	req.compression = u
	return nil
}

// compressChat compresses the messages of a chat request that asks for it, in place:
// system and developer messages and tool results are kept whole, as is the last sentence
// of the last user message; the other text is compressed as one prompt. It returns the
// messages as they were, for counting the original tokens.
func (s *Server) compressChat(ctx context.Context, req *chatRequest) ([]chatMessage, *APIError) {
	sc, rate, apiErr := s.compressor(req.PromptCompression)
	if apiErr != nil {
		return nil, apiErr
	}
	lastUser := -1
	for i, m := range req.Messages {
		if m.Role == "user" {
			lastUser = i
		}
	}
	var parts []promptcompress.Part
	owner := []int{} // the message of each part
	for i, m := range req.Messages {
		cm, apiErr := convertMessage(i, m)
		if apiErr != nil {
			return nil, apiErr
		}
		text, _ := cm.Content.(string)
		switch {
		case m.Role == "user" && i == lastUser:
			for _, p := range promptcompress.QuestionParts(text) {
				parts, owner = append(parts, p), append(owner, i)
			}
		case m.Role == "user" || m.Role == "assistant":
			parts, owner = append(parts, promptcompress.Part{Text: text}), append(owner, i)
		default:
			parts, owner = append(parts, promptcompress.Part{Text: text, Keep: true}), append(owner, i)
		}
	}
	res, apiErr := compressParts(ctx, sc, parts, rate)
	if apiErr != nil {
		return nil, apiErr
	}
	orig := req.Messages
	req.Messages = slices.Clone(orig)
	texts := make([]strings.Builder, len(orig))
	for j, i := range owner {
		texts[i].WriteString(res.Parts[j])
	}
	for i := range req.Messages {
		if req.Messages[i].Role == "user" || req.Messages[i].Role == "assistant" {
			if len(req.Messages[i].ToolCalls) > 0 && texts[i].Len() == 0 {
				continue // content stays null
			}
			b, _ := json.Marshal(texts[i].String())
			req.Messages[i].Content = b
		}
	}
	return orig, nil
}
