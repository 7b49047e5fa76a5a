package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/sot"
)

// Skeleton-of-Thought (issue 23): a chat request's skeleton_of_thought: true has the model
// outline its answer as a numbered skeleton, expands every point as a parallel sequence of
// the engine and answers with the points in order (package sot); the usage counts every
// sequence's tokens.

// sotUnsupported names the chat fields that do not combine with skeleton_of_thought, with
// whether the request sets them.
func (req *chatRequest) sotUnsupported() (string, bool) {
	c, _, _ := req.constraint()
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"n", req.N != nil && *req.N != 1},
		{"use_beam_search", req.UseBeamSearch},
		{"tools", len(req.Tools) > 0},
		{"logprobs", req.Logprobs},
		{"prompt_logprobs", req.PromptLogprobs != nil},
		{"continue_final_message", req.ContinueFinal},
		{"add_generation_prompt", req.AddGenerationPrompt != nil && !*req.AddGenerationPrompt},
		{"return_token_ids", req.ReturnTokenIDs},
		{"a structured output", c != nil},
	} {
		if f.set {
			return f.name, true
		}
	}
	return "", false
}

// renderError carries an APIError of rendering through sot.Run.
type renderError struct{ e *APIError }

func (r renderError) Error() string { return r.e.Message }

// handleSkeletonOfThought answers a chat request with skeleton_of_thought set.
func (s *Server) handleSkeletonOfThought(ctx context.Context, w http.ResponseWriter, req *chatRequest) {
	if name, bad := req.sotUnsupported(); bad {
		writeError(w, badRequest("skeleton_of_thought", "skeleton_of_thought does not combine with %s", name))
		return
	}
	plain, _, apiErr := s.chatRequest(ctx, req) // checks the request; the fallback
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	last := len(req.Messages) - 1
	if req.Messages[last].Role != "user" {
		writeError(w, badRequest("messages", "skeleton_of_thought needs a user message last (the question)"))
		return
	}
	var history []sot.Message
	for i, m := range req.Messages {
		cm, apiErr := convertMessage(i, m)
		if apiErr != nil {
			writeError(w, apiErr)
			return
		}
		text, _ := cm.Content.(string)
		history = append(history, sot.Message{Role: m.Role, Content: text})
	}
	id := newID("chatcmpl-")
	sr := sot.Request{ID: id, History: history[:last], Question: history[last].Content, Params: plain.Params,
		Priority: plain.Priority, CacheSalt: plain.CacheSalt, Plain: plain,
		Render: func(msgs []sot.Message, prefill string) ([]int32, error) {
			cms := make([]chatMessage, len(msgs), len(msgs)+1)
			for i, m := range msgs {
				content, _ := json.Marshal(m.Content)
				cms[i] = chatMessage{Role: m.Role, Content: content}
			}
			if prefill != "" {
				content, _ := json.Marshal(prefill)
				cms = append(cms, chatMessage{Role: "assistant", Content: content})
			}
			ids, apiErr := s.renderChat(ctx, cms, nil, true, prefill != "", req.ChatTemplateKwargs)
			if apiErr != nil {
				return nil, renderError{apiErr}
			}
			return ids, nil
		},
		Constrain: func(re string) (kvasir.Processor, error) { return s.eng.Constrain(kvasir.StructuredOutput{Regex: re}) },
	}
	base := chatResponse{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: s.modelName()}
	if !req.Stream {
		res, err := sot.Run(ctx, s.eng, sr, func(string) bool { return true })
		if err != nil {
			writeError(w, sotError(err))
			return
		}
		s.log.Debug("skeleton of thought", "id", id, "points", len(res.Points), "fallback", res.Fallback)
		text := res.Text
		base.Choices = []chatChoice{{Message: &chatMessageOut{Role: "assistant", Content: &text}, FinishReason: strPtr(res.FinishReason)}}
		base.Usage = sotUsage(res.Usage, req.compression)
		writeJSON(w, http.StatusOK, base)
		return
	}
	base.Object = "chat.completion.chunk"
	var sse *sseWriter // started with the first text, so that an early error is a plain 4xx/5xx
	chunk := func(c chatChoice) bool {
		out := base
		out.Choices = []chatChoice{c}
		return sse.send(out)
	}
	start := func() bool {
		if sse != nil {
			return true
		}
		sse = newSSE(w, int(s.cfg.MaxStreamBuffer))
		empty := ""
		return chunk(chatChoice{Delta: &chatDelta{Role: "assistant", Content: &empty}})
	}
	res, err := sot.Run(ctx, s.eng, sr, func(text string) bool {
		return start() && chunk(chatChoice{Delta: &chatDelta{Content: &text}})
	})
	if err != nil {
		if sse == nil {
			writeError(w, sotError(err))
			return
		}
		if ctx.Err() == nil {
			s.log.Error("skeleton of thought failed mid-stream", "id", id, "err", err)
			sse.fail(sotError(err))
		}
		sse.done()
		return
	}
	start()
	chunk(chatChoice{Delta: &chatDelta{}, FinishReason: strPtr(res.FinishReason)})
	if req.includeUsage() {
		out := base
		out.Choices = []chatChoice{}
		out.Usage = sotUsage(res.Usage, req.compression)
		sse.send(out)
	}
	sse.done()
}

// sotUsage is the usage of a Skeleton-of-Thought answer: every sequence's tokens.
func sotUsage(k kvasir.Usage, c *compressionUsage) *usage {
	var u usage
	u.add(k)
	u.PromptCompression = c
	return &u
}

// sotError maps an error of sot.Run to the API's.
func sotError(err error) *APIError {
	var re renderError
	if errors.As(err, &re) {
		return re.e
	}
	if errors.Is(err, kvasir.ErrQueueFull) || errors.Is(err, kvasir.ErrTooLong) || errors.As(err, new(*kvasir.ParamError)) {
		return engineError(err, "messages")
	}
	return internalError(err)
}
