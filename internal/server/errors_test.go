package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
)

func TestErrorStatuses(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	long := strings.Repeat("ka ", 400)
	huge := bytes.Repeat([]byte("a"), 50<<20)
	hugeBody := append(append([]byte(`{"prompt": "`), huge...), `"}`...)
	tests := []struct {
		name, method, path, body string
		raw                      []byte // body when set
		status                   int
		param                    string // expected param ("" to skip the check)
		msg                      string // a substring of the message
		code                     string
	}{
		{name: "malformed JSON", path: "/v1/completions", body: `{"prompt": "x",`, status: 400, msg: "malformed JSON"},
		{name: "malformed JSON syntax", path: "/v1/chat/completions", body: `{"messages": [}`, status: 400, msg: "malformed JSON"},
		{name: "empty body", path: "/v1/completions", body: ``, status: 400, msg: "empty"},
		{name: "null body", path: "/v1/completions", body: `null`, status: 400, msg: "JSON object"},
		{name: "array body", path: "/v1/completions", body: `[1,2]`, status: 400, msg: "JSON object"},
		{name: "wrong type max_tokens", path: "/v1/completions", body: `{"prompt":"x","max_tokens":"ten"}`, status: 400, param: "max_tokens", msg: "integer"},
		{name: "wrong type temperature", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, status: 400, param: "temperature", msg: "number"},
		{name: "wrong type stream", path: "/v1/completions", body: `{"prompt":"x","stream":"yes"}`, status: 400, param: "stream"},
		{name: "wrong type prompt", path: "/v1/completions", body: `{"prompt":{"a":1}}`, status: 400, param: "prompt"},
		{name: "wrong type stop", path: "/v1/completions", body: `{"prompt":"x","stop":5}`, status: 400, param: "stop"},
		{name: "wrong type messages", path: "/v1/chat/completions", body: `{"messages":"hi"}`, status: 400, param: "messages"},
		{name: "negative max_tokens", path: "/v1/completions", body: `{"prompt":"x","max_tokens":-5}`, status: 400, param: "max_tokens", msg: "at least 1"},
		{name: "zero max_tokens", path: "/v1/completions", body: `{"prompt":"x","max_tokens":0}`, status: 400, param: "max_tokens"},
		{name: "negative max_completion_tokens", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":-1}`, status: 400, param: "max_completion_tokens"},
		{name: "huge max_tokens", path: "/v1/completions", body: `{"prompt":"x","max_tokens":1000000}`, status: 400, msg: "256", code: "context_length_exceeded"},
		{name: "overflowing max_tokens", path: "/v1/completions", body: `{"prompt":"x","max_tokens":1e30}`, status: 400, param: "max_tokens"},
		{name: "invalid UTF-8", path: "/v1/completions", raw: []byte("{\"prompt\": \"\xff\xfe\"}"), status: 400, msg: "UTF-8"},
		{name: "empty messages", path: "/v1/chat/completions", body: `{"messages":[]}`, status: 400, param: "messages", msg: "at least one"},
		{name: "missing messages", path: "/v1/chat/completions", body: `{"model":"tiny"}`, status: 400, param: "messages"},
		{name: "message without role", path: "/v1/chat/completions", body: `{"messages":[{"content":"hi"}]}`, status: 400, param: "messages[0].role"},
		{name: "message content number", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":5}]}`, status: 400, param: "messages[0].content"},
		{name: "image part", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]}`, status: 400, param: "messages[0].content[0].type", msg: "text only"},
		{name: "missing prompt", path: "/v1/completions", body: `{"max_tokens":3}`, status: 400, param: "prompt"},
		{name: "empty prompt list", path: "/v1/completions", body: `{"prompt":[]}`, status: 400, param: "prompt"},
		{name: "token out of vocabulary", path: "/v1/completions", body: `{"prompt":[1,99999],"max_tokens":2}`, status: 400, param: "prompt"},
		{name: "prompt over the context", path: "/v1/completions", body: `{"prompt":"` + long + `","max_tokens":4}`, status: 400, param: "prompt", msg: "context length of 256", code: "context_length_exceeded"},
		{name: "chat over the context", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"` + long + `"}]}`, status: 400, param: "messages", code: "context_length_exceeded"},
		{name: "n zero", path: "/v1/completions", body: `{"prompt":"x","n":0}`, status: 400, param: "n"},
		{name: "negative temperature", path: "/v1/completions", body: `{"prompt":"x","temperature":-1}`, status: 400, param: "temperature"},
		{name: "top_p too big", path: "/v1/completions", body: `{"prompt":"x","top_p":1.5}`, status: 400, param: "top_p"},
		{name: "logprobs too many", path: "/v1/completions", body: `{"prompt":"x","logprobs":50}`, status: 400, param: "logprobs"},
		{name: "top_logprobs without logprobs", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}],"top_logprobs":2}`, status: 400, param: "top_logprobs"},
		{name: "logit_bias key", path: "/v1/completions", body: `{"prompt":"x","logit_bias":{"abc":1}}`, status: 400, param: "logit_bias"},
		{name: "logit_bias range", path: "/v1/completions", body: `{"prompt":"x","logit_bias":{"5":500}}`, status: 400, param: "logit_bias"},
		{name: "stop_token_ids range", path: "/v1/completions", body: `{"prompt":"x","stop_token_ids":[4000]}`, status: 400, param: "stop_token_ids"},
		{name: "negative prompt_logprobs", path: "/v1/completions", body: `{"prompt":"x","prompt_logprobs":-1}`, status: 400, param: "prompt_logprobs", msg: "[0, 20]"},
		{name: "prompt_logprobs too many", path: "/v1/completions", body: `{"prompt":"x","prompt_logprobs":21}`, status: 400, param: "prompt_logprobs", msg: "got 21"},
		{name: "prompt_logprobs fraction", path: "/v1/completions", body: `{"prompt":"x","prompt_logprobs":2.5}`, status: 400, param: "prompt_logprobs", msg: "integer"},
		{name: "prompt_logprobs string", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":"2"}`, status: 400, param: "prompt_logprobs"},
		{name: "chat prompt_logprobs too many", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":100}`, status: 400, param: "prompt_logprobs"},
		{name: "prompt_logprobs streamed", path: "/v1/completions", body: `{"prompt":"x","prompt_logprobs":1,"stream":true}`, status: 400, param: "prompt_logprobs", msg: "stream"},
		{name: "chat prompt_logprobs streamed", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}],"prompt_logprobs":0,"stream":true}`, status: 400, param: "prompt_logprobs", msg: "stream"},
		{name: "use_beam_search string", path: "/v1/completions", body: `{"prompt":"x","use_beam_search":"yes"}`, status: 400, param: "use_beam_search", msg: "boolean"},
		{name: "length_penalty overflow", path: "/v1/completions", body: `{"prompt":"x","use_beam_search":true,"length_penalty":1e300}`, status: 400, param: "length_penalty"},
		{name: "beam search with stop", path: "/v1/completions", body: `{"prompt":"x","use_beam_search":true,"n":2,"stop":["a"]}`, status: 400, param: "stop", msg: "beam search"},
		{name: "chat beam search with stop", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}],"use_beam_search":true,"stop":"a"}`, status: 400, param: "stop", msg: "beam search"},
		{name: "beam search with top_p", path: "/v1/completions", body: `{"prompt":"x","use_beam_search":true,"top_p":0.5}`, status: 400, param: "top_p", msg: "beam search"},
		{name: "beam search with presence_penalty", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}],"use_beam_search":true,"presence_penalty":1}`, status: 400, param: "presence_penalty"},
		{name: "beam search with prompt_logprobs", path: "/v1/completions", body: `{"prompt":"x","use_beam_search":true,"prompt_logprobs":1}`, status: 400, param: "prompt_logprobs", msg: "beam search"},
		{name: "beam search with echo and logprobs", path: "/v1/completions", body: `{"prompt":"x","use_beam_search":true,"echo":true,"logprobs":1}`, status: 400, param: "echo", msg: "beam search"},
		{name: "stream_options without stream", path: "/v1/completions", body: `{"prompt":"x","stream_options":{"include_usage":true}}`, status: 400, param: "stream_options"},
		{name: "response_format type", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"xml"}}`, status: 400, param: "response_format.type"},
		{name: "response_format schema", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":"no"}}}`, status: 400, param: "response_format.json_schema.schema"},
		{name: "response_format no json_schema", path: "/v1/chat/completions", body: `{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema"}}`, status: 400, param: "response_format.json_schema"},
		{name: "unknown model", path: "/v1/completions", body: `{"model":"gpt-9","prompt":"x"}`, status: 404, param: "model", code: "model_not_found"},
		{name: "unknown model chat", path: "/v1/chat/completions", body: `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, status: 404, param: "model"},
		{name: "50 MB body", path: "/v1/completions", raw: hugeBody, status: 413, msg: "exceeds"},
		{name: "wrong method", method: "GET", path: "/v1/completions", status: 405},
		{name: "wrong method models", method: "POST", path: "/v1/models", body: `{}`, status: 405},
		{name: "unknown path", method: "GET", path: "/v1/nothing", status: 404},
		{name: "detokenize out of range", path: "/detokenize", body: `{"tokens":[1,5000]}`, status: 400, param: "tokens"},
		{name: "tokenize nothing", path: "/tokenize", body: `{}`, status: 400, param: "prompt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.method
			if m == "" {
				m = http.MethodPost
			}
			body := tc.raw
			if body == nil {
				body = []byte(tc.body)
			}
			status, got := env.do(t, m, tc.path, body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, got)
			}
			e := apiErrorOf(t, got)
			if tc.param != "" && e["param"] != tc.param {
				t.Errorf("param %v, want %q: %s", e["param"], tc.param, got)
			}
			if msg, _ := e["message"].(string); !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q does not mention %q", msg, tc.msg)
			}
			if tc.code != "" && e["code"] != tc.code {
				t.Errorf("code %v, want %q", e["code"], tc.code)
			}
		})
	}
	// The server is still fine after all of that.
	var res completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 2}, &res)
	waitIdle(t, env.eng, 5*time.Second)
}

func TestAPIKey(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{APIKey: "sekret"})
	body := []byte(`{"prompt":"x","max_tokens":1}`)
	for _, tc := range []struct {
		name, auth, path string
		status           int
	}{
		{"missing", "", "/v1/completions", 401},
		{"wrong", "Bearer nope", "/v1/completions", 401},
		{"not bearer", "sekret", "/v1/completions", 401},
		{"models missing", "", "/v1/models", 401},
		{"tokenize missing", "", "/tokenize", 401},
		{"right", "Bearer sekret", "/v1/completions", 200},
		{"health is open", "", "/health", 200},
		{"metrics is open", "", "/metrics", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := http.MethodPost
			if tc.path == "/v1/models" || tc.path == "/health" || tc.path == "/metrics" {
				m = http.MethodGet
			}
			req, _ := http.NewRequest(m, env.ts.URL+tc.path, bytes.NewReader(body))
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, got)
			}
			if tc.status == 401 {
				if e := apiErrorOf(t, got); e["code"] != "invalid_api_key" {
					t.Errorf("code %v", e["code"])
				}
			}
		})
	}
}

// TestQueueFull fills the single running slot and the one waiting place, then expects 429.
func TestQueueFull(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{MaxNumSeqs: 1, MaxWaiting: 1, KVCacheMemory: 64 << 20}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Long enough to still run when the third request comes, however fast the machine:
	// up to the context length (they are cancelled at the end).
	long := []byte(fmt.Sprintf(`{"prompt":"hello","max_tokens":%d,"ignore_eos":true,"stream":true}`, env.eng.MaxModelLen()-8))
	var wg sync.WaitGroup
	started := make(chan struct{}, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.ts.URL+"/v1/completions", bytes.NewReader(long))
			res, err := env.ts.Client().Do(req)
			if err != nil {
				started <- struct{}{}
				return
			}
			defer res.Body.Close()
			started <- struct{}{}
			io.Copy(io.Discard, res.Body)
		}()
		<-started
		// The first must be running before the second comes, or the second finds it
		// still waiting and is refused itself.
		for i == 0 && env.eng.Stats().Running == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for s := env.eng.Stats(); s.Running+s.Waiting < 2; s = env.eng.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("requests did not start: %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	status, body := env.do(t, http.MethodPost, "/v1/completions", []byte(`{"prompt":"x","max_tokens":1}`))
	if status != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429: %s", status, body)
	}
	if e := apiErrorOf(t, body); e["type"] != "rate_limit_error" {
		t.Errorf("type %v", e["type"])
	}
	cancel()
	wg.Wait()
	waitIdle(t, env.eng, 5*time.Second)
}

func TestRecoverPanics(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := s.recoverPanics(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]int
		m["boom"]++ // nil map write panics
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/x", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d", rec.Code)
	}
	var body errorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error == nil || body.Error.Type != "internal_server_error" {
		t.Fatalf("body %s (%v)", rec.Body, err)
	}
}
