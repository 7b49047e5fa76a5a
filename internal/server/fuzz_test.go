package server

import (
	"io"
	"log/slog"
	"math"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// FuzzDecodeRequests feeds arbitrary bodies to the request decoders and validators: they
// must never panic, and a body they accept must give parameters within the limits.
func FuzzDecodeRequests(f *testing.F) {
	for _, seed := range []string{
		`{"prompt":"hello","max_tokens":5,"stop":["a","b"],"n":2,"logprobs":3}`,
		`{"prompt":[1,2,3],"echo":true,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":[[1,2],[3]],"logit_bias":{"5":-100},"seed":-1}`,
		`{"prompt":["a","b"],"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.1}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3,"logprobs":true,"top_logprobs":2}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}]}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`,
		`{"messages":[],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}}`,
		`{"messages":[],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
		`{"messages":[],"tool_choice":"none","guided_json":{"type":"object"},"functions":null}`,
		`{"prompt":"hi","prompt_logprobs":3,"echo":true,"logprobs":2}`,
		`{"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":-1,"stream":true}`,
		`{"prompt":[1,2],"use_beam_search":true,"n":4,"length_penalty":-0.5,"stream":true}`,
		`{"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":-1,"use_beam_search":true,"length_penalty":1e39}`,
		`{"prompt":"x","max_tokens":-1}`, `{"prompt":{}}`, `{"stop":5}`, `[]`, `null`, `{`, "\xff",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var c completionRequest
		if unknown, err := decodeJSON(body, &c); err == nil {
			if err := refuseUnimplemented(unknown); err != nil && (err.Status != 400 || unimplementedFields[err.Param] == "") {
				t.Errorf("unimplemented-field error %+v", err)
			}
			if p, err := c.params(c.MaxTokens, "max_tokens", DefaultCompletionMaxTokens, kvasir.NeutralSampling()); err == nil {
				if p.MaxTokens < 1 || p.N < 0 || p.N > MaxN || p.MinTokens < 0 {
					t.Errorf("accepted out-of-range params %+v", p)
				}
			} else if err.Status != 400 || err.Param == "" {
				t.Errorf("params error %+v", err)
			}
			var p kvasir.SamplingParams
			if err := c.promptLogprobsParams(&p); err != nil {
				if err.Status != 400 || err.Param != "prompt_logprobs" {
					t.Errorf("prompt_logprobs error %+v", err)
				}
			} else if p.PromptLogprobs != (c.PromptLogprobs != nil) || p.PromptTopLogprobs < 0 || p.PromptTopLogprobs > MaxTopLogprobs || (p.PromptLogprobs && c.Stream) {
				t.Errorf("accepted prompt_logprobs %v (stream %v) as %v, %d", c.PromptLogprobs, c.Stream, p.PromptLogprobs, p.PromptTopLogprobs)
			}
			if err := c.beamSearchParams(&p); err != nil {
				if err.Status != 400 || err.Param != "length_penalty" {
					t.Errorf("beam search error %+v", err)
				}
			} else if p.UseBeamSearch != c.UseBeamSearch || math.IsInf(float64(p.LengthPenalty), 0) || math.IsNaN(float64(p.LengthPenalty)) {
				t.Errorf("accepted use_beam_search %v, length_penalty %v as %v, %v", c.UseBeamSearch, c.LengthPenalty, p.UseBeamSearch, p.LengthPenalty)
			}
			for _, item := range c.Prompt {
				if item.IsText == (item.Tokens != nil) {
					t.Errorf("prompt item is both or neither text and tokens: %+v", item)
				}
			}
		} else if err.Status != 400 {
			t.Errorf("decode error status %d", err.Status)
		}
		var ch chatRequest
		if _, err := decodeJSON(body, &ch); err == nil {
			for i, m := range ch.Messages {
				if _, err := convertMessage(i, m); err != nil && err.Param == "" {
					t.Errorf("message error without param: %+v", err)
				}
			}
			if ch.ResponseFormat != nil {
				if err := ch.ResponseFormat.validate(); err != nil && err.Status != 400 {
					t.Errorf("response_format error %+v", err)
				}
			}
			// A server with no tool-call parser parses no reply for calls.
			tr, _, err := (&Server{}).toolRequest(&ch)
			if err != nil && (err.Status != 400 || err.Param == "") {
				t.Errorf("tools error %+v", err)
			} else if err == nil && tr != nil {
				t.Errorf("tools accepted for parsing without a parser: %+v", tr)
			}
		}
	})
}

func TestParamPath(t *testing.T) {
	for in, want := range map[string]string{
		"commonRequest.max_tokens": "max_tokens",
		"messages.0.role":          "messages[0].role",
		"prompt":                   "prompt",
		"messages.12.content.3":    "messages[12].content[3]",
	} {
		if got := paramPath(in); got != want {
			t.Errorf("paramPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzOllamaRequests feeds arbitrary bodies to the readers of ollama's /api/generate and
// /api/chat and of llama-server's /completion: they never panic, an error is a 400 naming
// nothing it should not, and accepted options give parameters within the limits.
func FuzzOllamaRequests(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","prompt":"hi","options":{"num_predict":5,"temperature":0.2,"top_k":3,"top_p":0.5,"min_p":0.1,"seed":4,"stop":["a"],"repeat_penalty":1.1}}`,
		`{"prompt":"x","format":"json","stream":false,"raw":true,"system":"s"}`,
		`{"prompt":"x","format":{"type":"object"},"options":{"num_predict":-1,"num_ctx":4096}}`,
		`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]}],"tools":[]}`,
		`{"prompt":"x","n_predict":-1,"stream":true,"repeat_penalty":1.2,"n_probs":2,"cache_prompt":true}`,
		`{"options":{"stop":"a"}}`, `{"options":[]}`, `{"format":1}`, `{"options":{"num_predict":1e99}}`, `{`, `null`,
	} {
		f.Add([]byte(seed))
	}
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, dst := range []any{&ollamaGenerateRequest{}, &ollamaChatRequest{}} {
			if _, err := decodeJSON(body, dst); err != nil {
				if err.Status != 400 {
					t.Errorf("decode error status %d", err.Status)
				}
				continue
			}
			var common *ollamaCommon
			switch r := dst.(type) {
			case *ollamaGenerateRequest:
				common = &r.ollamaCommon
			case *ollamaChatRequest:
				common = &r.ollamaCommon
			}
			c, err := s.ollamaCommonRequest("/api/x", common)
			if err != nil {
				if err.Status != 400 {
					t.Errorf("options error %+v", err)
				}
				continue
			}
			if c.Stream != (common.Stream == nil || *common.Stream) {
				t.Errorf("stream %v from %v", c.Stream, common.Stream)
			}
			if p, err := c.params(c.MaxTokens, "max_tokens", 0, kvasir.NeutralSampling()); err == nil {
				if p.MaxTokens < 0 || p.N != 0 {
					t.Errorf("accepted out-of-range params %+v", p)
				}
			} else if err.Status != 400 || err.Param == "" {
				t.Errorf("params error %+v", err)
			}
		}
		var l llamaCompletionRequest
		if _, err := decodeJSON(body, &l); err != nil && err.Status != 400 {
			t.Errorf("/completion decode error status %d", err.Status)
		}
	})
}
