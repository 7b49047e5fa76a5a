package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// compressionText is a prompt of several sentences, the last one the question.
const compressionText = "The harbor town woke early. Fishermen mended their nets by the pier. " +
	"Gulls circled over the boats. A baker opened her shop at dawn. The mayor walked to the hall. " +
	"Children ran to school along the quay. Who opened a shop at dawn?"

type compressionUsageOut struct {
	PromptTokens      int `json:"prompt_tokens"`
	PromptCompression *struct {
		OriginalTokens int `json:"original_tokens"`
		KeptTokens     int `json:"kept_tokens"`
	} `json:"prompt_compression"`
}

// TestPromptCompressionCompletions: the prompt is compressed to about the rate, the usage
// says so, the question survives, and the generation is the plain one of the compressed
// prompt (echoed).
func TestPromptCompressionCompletions(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var out struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage compressionUsageOut `json:"usage"`
	}
	env.post(t, "/v1/completions", map[string]any{"prompt": compressionText, "max_tokens": 8, "temperature": 0, "echo": true,
		"prompt_compression": map[string]any{"rate": 0.5}}, &out)
	pc := out.Usage.PromptCompression
	if pc == nil {
		t.Fatalf("no usage.prompt_compression: %+v", out.Usage)
	}
	if pc.KeptTokens != out.Usage.PromptTokens || pc.OriginalTokens <= pc.KeptTokens {
		t.Errorf("usage %+v, compression %+v: want kept = prompt_tokens < original", out.Usage, *pc)
	}
	if r := float64(pc.KeptTokens) / float64(pc.OriginalTokens); r < 0.35 || r > 0.7 {
		t.Errorf("kept %d of %d tokens (%.2f) at rate 0.5", pc.KeptTokens, pc.OriginalTokens, r)
	}
	text := out.Choices[0].Text
	if !strings.Contains(text, "Who opened a shop at dawn?") {
		t.Errorf("the question did not survive: %q", text)
	}
	// The echoed prompt is the compressed one; generating from it plainly gives the same
	// continuation (greedy).
	var plain struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage compressionUsageOut `json:"usage"`
	}
	prompt := text[:strings.Index(text, "dawn?")+len("dawn?")]
	env.post(t, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 8, "temperature": 0}, &plain)
	if prompt+plain.Choices[0].Text != text {
		t.Errorf("compressed run %q, plain run of its prompt %q", text, prompt+plain.Choices[0].Text)
	}
	if plain.Usage.PromptCompression != nil {
		t.Errorf("a plain request reports prompt_compression %+v", *plain.Usage.PromptCompression)
	}
	waitIdle(t, env.eng, 5e9)
}

// TestPromptCompressionChat: chat messages are compressed, the system message kept, the
// counts reported (streamed too).
func TestPromptCompressionChat(t *testing.T) {
	small := newTinyEngine(t, kvasir.Options{})
	env := newTestEnv(t, kvasir.Options{}, Config{CompressionModels: map[string]*kvasir.Engine{"small": small}})
	msgs := []map[string]any{{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": compressionText}}
	for _, model := range []string{"", "small"} {
		var out struct {
			Usage compressionUsageOut `json:"usage"`
		}
		env.post(t, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 4,
			"prompt_compression": map[string]any{"rate": 0.4, "model": model}}, &out)
		pc := out.Usage.PromptCompression
		if pc == nil || pc.KeptTokens != out.Usage.PromptTokens || pc.OriginalTokens <= pc.KeptTokens {
			t.Errorf("model %q: usage %+v", model, out.Usage)
		}
	}
	events := env.stream(t, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 4, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "prompt_compression": map[string]any{"rate": 0.4}})
	var last struct {
		Usage *compressionUsageOut `json:"usage"`
	}
	if len(events) < 2 || json.Unmarshal([]byte(events[len(events)-2]), &last) != nil || last.Usage == nil || last.Usage.PromptCompression == nil {
		t.Fatalf("stream's usage chunk without prompt_compression: %q", events[max(len(events)-2, 0):])
	}
	waitIdle(t, env.eng, 5e9)
	waitIdle(t, small, 5e9)
}

// TestPromptCompressionBadInput: a rate outside (0, 1], no rate, an unknown model or key,
// token prompts: 400 naming the field.
func TestPromptCompressionBadInput(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	for _, tc := range []struct {
		path  string
		body  string
		param string
	}{
		{"/v1/completions", `{"prompt": "a. b?", "prompt_compression": {"rate": 0}}`, "prompt_compression.rate"},
		{"/v1/completions", `{"prompt": "a. b?", "prompt_compression": {"rate": 1.5}}`, "prompt_compression.rate"},
		{"/v1/completions", `{"prompt": "a. b?", "prompt_compression": {"rate": -0.1}}`, "prompt_compression.rate"},
		{"/v1/completions", `{"prompt": "a. b?", "prompt_compression": {}}`, "prompt_compression.rate"},
		{"/v1/completions", `{"prompt": "a. b?", "prompt_compression": {"rate": 0.5, "model": "nope"}}`, "prompt_compression.model"},
		{"/v1/completions", `{"prompt": [1, 2, 3], "prompt_compression": {"rate": 0.5}}`, "prompt_compression"},
		{"/v1/completions", `{"prompt": "a. b?", "prompt_compression": {"rate": 0.5, "ratio": 2}}`, "prompt_compression"},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "a. b?"}], "prompt_compression": {"rate": 2}}`, "prompt_compression.rate"},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "a. b?"}], "prompt_compression": {"rate": 0.5, "model": "nope"}}`, "prompt_compression.model"},
	} {
		status, body := env.do(t, http.MethodPost, tc.path, []byte(tc.body))
		if status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400: %s", tc.body, status, body)
			continue
		}
		if e := apiErrorOf(t, body); e["param"] != tc.param {
			t.Errorf("%s: param %v, want %s: %s", tc.body, e["param"], tc.param, body)
		}
	}
	waitIdle(t, env.eng, 5e9)
}

// TestCompressChatKeepsInstructionsAndQuestion: the system message and the last user
// message's last sentence come through whole; the rest shrinks.
func TestCompressChatKeepsInstructionsAndQuestion(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	rate := 0.3
	raw := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	system := "You answer in one word. Never explain."
	req := chatRequest{Messages: []chatMessage{{Role: "system", Content: raw(system)}, {Role: "user", Content: raw(compressionText)}}}
	req.PromptCompression = &promptCompressionField{Rate: &rate}
	orig, apiErr := env.srv.compressChat(t.Context(), &req)
	if apiErr != nil {
		t.Fatal(apiErr.Message)
	}
	var gotSystem, gotUser string
	json.Unmarshal(req.Messages[0].Content, &gotSystem)
	json.Unmarshal(req.Messages[1].Content, &gotUser)
	if gotSystem != system {
		t.Errorf("system message %q, want it whole", gotSystem)
	}
	if !strings.HasSuffix(gotUser, "Who opened a shop at dawn?") || len(gotUser) >= len(compressionText)*3/4 {
		t.Errorf("user message compressed to %q", gotUser)
	}
	if string(orig[1].Content) != string(raw(compressionText)) {
		t.Errorf("the original messages changed: %s", orig[1].Content)
	}
	waitIdle(t, env.eng, 5e9)
}
