package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// ndjson posts body to path and returns the objects of the newline-delimited JSON answer.
func (e *testEnv) ndjson(t *testing.T, path string, body any) []map[string]any {
	t.Helper()
	b, _ := json.Marshal(body)
	res, err := e.ts.Client().Post(e.ts.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("%s: status %d, content type %q", path, res.StatusCode, res.Header.Get("Content-Type"))
	}
	var out []map[string]any
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: line %q is not JSON: %v", path, sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestOllamaGenerate: /api/generate streams NDJSON by default, one object per piece of text
// then a done object with done_reason, counts and nanosecond durations; the text is the
// same as a greedy /v1/completions of the raw prompt; stream false answers one object;
// num_predict maps to max_tokens.
func TestOllamaGenerate(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	opts := map[string]any{"num_predict": 7, "temperature": 0, "top_k": 5, "top_p": 0.9, "min_p": 0.01, "seed": 1, "repeat_penalty": 1.0, "num_ctx": 2048}
	lines := env.ndjson(t, "/api/generate", map[string]any{"model": "tiny:latest", "prompt": "hello", "raw": true, "options": opts})
	if len(lines) < 2 {
		t.Fatalf("%d lines", len(lines))
	}
	var text strings.Builder
	for _, l := range lines[:len(lines)-1] {
		if l["done"] != false || l["model"] != "tiny:latest" || l["created_at"] == "" {
			t.Fatalf("chunk %v", l)
		}
		text.WriteString(l["response"].(string))
	}
	last := lines[len(lines)-1]
	text.WriteString(last["response"].(string))
	if last["done"] != true || last["done_reason"] != "length" || last["eval_count"] != 7.0 {
		t.Fatalf("last object %v", last)
	}
	for _, k := range []string{"total_duration", "prompt_eval_duration", "eval_duration", "prompt_eval_count"} {
		if v, _ := last[k].(float64); v <= 0 {
			t.Errorf("%s = %v", k, last[k])
		}
	}
	if ctx, _ := last["context"].([]any); len(ctx) == 0 {
		t.Error("no context")
	}
	var want completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 7, "temperature": 0}, &want)
	if text.String() != want.Choices[0].Text {
		t.Errorf("streamed %q, /v1/completions %q", text.String(), want.Choices[0].Text)
	}

	var whole map[string]any
	env.post(t, "/api/generate", map[string]any{"prompt": "hello", "raw": true, "stream": false, "options": map[string]any{"num_predict": 7, "temperature": 0}}, &whole)
	if whole["response"] != want.Choices[0].Text || whole["done"] != true || whole["model"] != testModelName {
		t.Errorf("stream false: %v", whole)
	}
	// An empty prompt loads the model.
	env.post(t, "/api/generate", map[string]any{"model": "tiny"}, &whole)
	if whole["done_reason"] != "load" {
		t.Errorf("empty prompt: %v", whole)
	}
	// format "json" and a schema hold the answer to JSON (structured output).
	for _, format := range []any{"json", map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "integer"}}, "required": []string{"a"}}} {
		env.post(t, "/api/generate", map[string]any{"prompt": "hello", "raw": true, "stream": false, "format": format,
			"options": map[string]any{"num_predict": 60, "temperature": 0}}, &whole)
		text, _ := whole["response"].(string)
		if !strings.HasPrefix(strings.TrimSpace(text), "{") || whole["done_reason"] == "stop" && !json.Valid([]byte(text)) {
			t.Errorf("format %v: %q (%v)", format, text, whole["done_reason"])
		}
	}
	// A stop string ends with done_reason stop.
	env.post(t, "/api/generate", map[string]any{"prompt": "hello", "raw": true, "stream": false,
		"options": map[string]any{"num_predict": 7, "temperature": 0, "stop": []string{want.Choices[0].Text[2:4]}}}, &whole)
	if whole["done_reason"] != "stop" {
		t.Errorf("stop: %v", whole)
	}
}

// TestOllamaChat: /api/chat streams message deltas and a done object; stream false answers
// the whole message; its text is the chat template's greedy answer, as /v1/chat/completions.
func TestOllamaChat(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	msgs := []map[string]any{{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}}
	lines := env.ndjson(t, "/api/chat", map[string]any{"model": "tiny", "messages": msgs, "options": map[string]any{"num_predict": 5, "temperature": 0}})
	var text strings.Builder
	for _, l := range lines {
		m := l["message"].(map[string]any)
		if m["role"] != "assistant" {
			t.Fatalf("%v", l)
		}
		text.WriteString(m["content"].(string))
	}
	last := lines[len(lines)-1]
	if last["done"] != true || last["done_reason"] != "length" || last["eval_count"] != 5.0 {
		t.Fatalf("last %v", last)
	}
	var want chatResponse
	env.post(t, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 5, "temperature": 0}, &want)
	if got := text.String(); got != want.Choices[0].Message.text() {
		t.Errorf("/api/chat %q, /v1/chat/completions %q", got, want.Choices[0].Message.text())
	}
	var whole map[string]any
	env.post(t, "/api/chat", map[string]any{"messages": msgs, "stream": false, "options": map[string]any{"num_predict": 5, "temperature": 0}}, &whole)
	if m, _ := whole["message"].(map[string]any); m == nil || m["content"] != want.Choices[0].Message.text() {
		t.Errorf("stream false: %v", whole)
	}
}

// TestOllamaErrors: errors come in ollama's shape, {"error": "..."}, with the status.
func TestOllamaErrors(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	for _, tc := range []struct {
		path, body string
		status     int
		says       string
	}{
		{"/api/generate", `{"model":"llama3","prompt":"x"}`, 404, "not found"},
		{"/api/chat", `{"messages":[{"role":"user","content":"x"}],"options":{"temperature":-1}}`, 400, "temperature"},
		{"/api/generate", `{"prompt":"x","format":"yaml"}`, 400, "format"},
		{"/api/generate", `{"prompt":"x","images":["aGk="]}`, 400, "images"},
		{"/api/generate", `{"prompt":`, 400, ""},
		{"/api/embed", `{"input":"x"}`, 400, "generative model"},
		{"/api/show", `{"model":"other"}`, 404, "not found"},
	} {
		status, body := env.do(t, http.MethodPost, tc.path, []byte(tc.body))
		var e map[string]any
		if err := json.Unmarshal(body, &e); err != nil || status != tc.status {
			t.Errorf("%s %s: %d %s", tc.path, tc.body, status, body)
			continue
		}
		if msg, ok := e["error"].(string); !ok || !strings.Contains(msg, tc.says) {
			t.Errorf("%s %s: error %v, want a string saying %q", tc.path, tc.body, e["error"], tc.says)
		}
	}
}

// TestOllamaModels: /api/tags, /api/show, /api/ps and /api/version describe the served model.
func TestOllamaModels(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{Version: "1.2.3"})
	var tags struct {
		Models []struct {
			Name    string `json:"name"`
			Size    int64  `json:"size"`
			Details struct {
				Family        string `json:"family"`
				ParameterSize string `json:"parameter_size"`
			} `json:"details"`
		} `json:"models"`
	}
	_, body := env.do(t, http.MethodGet, "/api/tags", nil)
	if err := json.Unmarshal(body, &tags); err != nil || len(tags.Models) != 1 || tags.Models[0].Name != testModelName ||
		tags.Models[0].Size <= 0 || tags.Models[0].Details.Family != "llama" {
		t.Errorf("/api/tags: %s", body)
	}
	var show map[string]any
	env.post(t, "/api/show", map[string]any{"model": "tiny:latest"}, &show)
	if info, _ := show["model_info"].(map[string]any); info["llama.context_length"] != float64(testContextLen) || show["template"] == "" {
		t.Errorf("/api/show: %v", show)
	}
	_, body = env.do(t, http.MethodGet, "/api/version", nil)
	if string(bytes.TrimSpace(body)) != `{"version":"1.2.3"}` {
		t.Errorf("/api/version: %s", body)
	}
	if status, body := env.do(t, http.MethodGet, "/api/ps", nil); status != 200 || !strings.Contains(string(body), `"name":"tiny"`) {
		t.Errorf("/api/ps: %d %s", status, body)
	}
}

// TestLlamaCompletion: llama-server's /completion answers content, stop_type and timings;
// its stream is SSE whose last event has stop true and no [DONE] follows; /props and a JSON
// /health answer.
func TestLlamaCompletion(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var res llamaCompletion
	env.post(t, "/completion", map[string]any{"prompt": "hello", "n_predict": 6, "temperature": 0}, &res)
	var want completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 6, "temperature": 0}, &want)
	if res.Content != want.Choices[0].Text || !res.Stop || res.StopType != "limit" || res.TokensPredicted != 6 || len(res.Tokens) != 6 ||
		res.Timings == nil || res.Timings.PredictedN != 6 || res.TokensEvaluated != want.Usage.PromptTokens {
		t.Errorf("/completion: %+v (want %q)", res, want.Choices[0].Text)
	}
	events := env.stream(t, "/completion", map[string]any{"prompt": "hello", "n_predict": 6, "temperature": 0, "stream": true})
	var text strings.Builder
	for i, ev := range events {
		var c llamaCompletion
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		text.WriteString(c.Content)
		if c.Stop != (i == len(events)-1) {
			t.Errorf("event %d of %d: stop %v", i, len(events), c.Stop)
		}
	}
	if text.String() != want.Choices[0].Text {
		t.Errorf("streamed %q", text.String())
	}
	var props map[string]any
	_, body := env.do(t, http.MethodGet, "/props", nil)
	if err := json.Unmarshal(body, &props); err != nil || props["default_generation_settings"].(map[string]any)["n_ctx"] != float64(testContextLen) {
		t.Errorf("/props: %s", body)
	}
	if status, body := env.do(t, http.MethodGet, "/health", nil); status != 200 || string(bytes.TrimSpace(body)) != `{"status":"ok"}` {
		t.Errorf("/health: %d %s", status, body)
	}
	if status, _ := env.do(t, http.MethodPost, "/completion", []byte(`{"prompt":"x","n_predict":0}`)); status != 400 {
		t.Errorf("n_predict 0: %d", status)
	}
}

// TestOpenAPIListsEndpoints: /openapi.json is an OpenAPI document, and every operation it
// lists is served (not the catch-all 404).
func TestOpenAPIListsEndpoints(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	_, body := env.do(t, http.MethodGet, "/openapi.json", nil)
	if err := json.Unmarshal(body, &doc); err != nil || !strings.HasPrefix(doc.OpenAPI, "3.") || len(doc.Paths) < 15 {
		t.Fatalf("/openapi.json: %s", body)
	}
	for path, ops := range doc.Paths {
		for m := range ops {
			p := strings.ReplaceAll(path, "{model}", testModelName)
			status, body := env.do(t, strings.ToUpper(m), p, []byte(`{}`))
			if status == 404 && strings.Contains(string(body), "no such endpoint") || status == 405 {
				t.Errorf("%s %s: %d %s", m, path, status, body)
			}
		}
	}
}

// TestCORSPreflight: a browser's preflight (OPTIONS with Origin and
// Access-Control-Request-Method) of an allowed origin gets 204 with the methods and headers
// it asked for; a method or header outside --allowed-methods/--allowed-headers gets 403;
// the API key is not asked of the preflight, and the ollama endpoints take the key.
func TestCORSPreflight(t *testing.T) {
	all := newTestEnv(t, kvasir.Options{}, Config{AllowedOrigins: []string{"*"}, APIKey: "k"})
	some := newTestEnv(t, kvasir.Options{}, Config{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"GET", "POST"}, AllowedHeaders: []string{"Content-Type", "Authorization"}})
	preflight := func(env *testEnv, path, method, headers string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, env.ts.URL+path, nil)
		req.Header.Set("Origin", "http://localhost:5173")
		req.Header.Set("Access-Control-Request-Method", method)
		if headers != "" {
			req.Header.Set("Access-Control-Request-Headers", headers)
		}
		res, err := env.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	for _, tc := range []struct {
		env                   *testEnv
		path, method, headers string
		status                int
	}{
		{all, "/api/chat", "POST", "content-type, x-custom", 204},
		{all, "/v1/chat/completions", "POST", "authorization, content-type", 204},
		{all, "/api/tags", "DELETE", "", 204},
		{some, "/api/chat", "POST", "content-type", 204},
		{some, "/api/chat", "PUT", "content-type", 403},
		{some, "/api/chat", "POST", "content-type, x-custom", 403},
	} {
		res := preflight(tc.env, tc.path, tc.method, tc.headers)
		name := tc.path + " " + tc.method + " " + tc.headers
		if res.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", name, res.StatusCode, tc.status)
			continue
		}
		acao := res.Header.Get("Access-Control-Allow-Origin")
		if tc.status == 403 {
			if acao != "" {
				t.Errorf("%s: refused with Access-Control-Allow-Origin %q", name, acao)
			}
			continue
		}
		if acao != "http://localhost:5173" || !strings.Contains(res.Header.Get("Access-Control-Allow-Methods"), tc.method) ||
			res.Header.Get("Access-Control-Allow-Headers") != tc.headers {
			t.Errorf("%s: %v", name, res.Header)
		}
	}
	for _, p := range []string{"/api/tags", "/completion"} {
		res, err := all.ts.Client().Get(all.ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 401 {
			t.Errorf("%s without the key: %d", p, res.StatusCode)
		}
	}
}
