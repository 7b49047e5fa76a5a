package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// newSoTEnv is a test server on the tiny model (Q8_0: greedy tokens that do not change
// with the batch) with a context long enough for the Skeleton-of-Thought templates.
func newSoTEnv(t *testing.T) *testEnv {
	t.Helper()
	eng := openTinyEngine(t, kvasir.Options{}, quant.Q8_0, 2048, testChatTemplate)
	srv, err := New(eng, Config{ModelNames: []string{testModelName}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &testEnv{eng: eng, srv: srv, ts: ts}
}

func sotBody(extra map[string]any) map[string]any {
	b := map[string]any{"messages": []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How do I make tea?"}},
		"skeleton_of_thought": true, "temperature": 0, "max_tokens": 30}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

type sotReply struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// TestSkeletonOfThoughtChat: a numbered answer of at least two points, with usage over
// every sequence (more than the plain request's prompt, at least max_tokens of points plus
// the skeleton); streamed, the same answer and usage.
func TestSkeletonOfThoughtChat(t *testing.T) {
	env := newSoTEnv(t)
	var out sotReply
	env.post(t, "/v1/chat/completions", sotBody(nil), &out)
	text := out.Choices[0].Message.Content
	if !strings.HasPrefix(text, "1. ") || !strings.Contains(text, "\n2. ") {
		t.Fatalf("answer %q is not the expanded points", text)
	}
	var plain sotReply
	env.post(t, "/v1/chat/completions", sotBody(map[string]any{"skeleton_of_thought": false}), &plain)
	u := out.Usage
	if u.PromptTokens <= 3*plain.Usage.PromptTokens || u.CompletionTokens <= 30 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage %+v: want the skeleton's and every point's tokens (plain prompt %d tokens)", u, plain.Usage.PromptTokens)
	}
	if f := out.Choices[0].FinishReason; f != "stop" && f != "length" {
		t.Errorf("finish_reason %q", f)
	}
	events := env.stream(t, "/v1/chat/completions", sotBody(map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}))
	if events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream ends with %q", events[len(events)-1])
	}
	var streamed strings.Builder
	var usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	}
	for _, e := range events[:len(events)-1] {
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %q: %v", e, err)
		}
		for _, ch := range c.Choices {
			streamed.WriteString(ch.Delta.Content)
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	if streamed.String() != text {
		t.Errorf("streamed %q, unstreamed %q", streamed.String(), text)
	}
	if usage == nil || usage.PromptTokens != u.PromptTokens || usage.CompletionTokens != u.CompletionTokens {
		t.Errorf("streamed usage %+v, unstreamed %+v", usage, u)
	}
	waitIdle(t, env.eng, 5*time.Second)
}

// TestSkeletonOfThoughtDisconnect: a client leaving a stream mid-answer ends every
// sequence: no KV block held, no goroutine left.
func TestSkeletonOfThoughtDisconnect(t *testing.T) {
	env := newSoTEnv(t)
	var warm sotReply
	env.post(t, "/v1/chat/completions", sotBody(map[string]any{"max_tokens": 4}), &warm)
	waitIdle(t, env.eng, 5*time.Second)
	env.ts.Client().CloseIdleConnections()
	baseline := runtime.NumGoroutine()
	b, _ := json.Marshal(sotBody(map[string]any{"stream": true, "max_tokens": 1500}))
	res, err := env.ts.Client().Post(env.ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(res.Body)
	for n := 0; n < 6 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	// The later points start once the first one's prompt is computed: wait for them (under
	// the race detector six events can come before that).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s := env.eng.Stats()
		if s.Running+s.Waiting >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sequences running, %d waiting at the disconnect: want the points in flight", s.Running, s.Waiting)
		}
	}
	res.Body.Close()
	env.ts.Client().CloseIdleConnections()
	waitIdle(t, env.eng, 10*time.Second)
	waitGoroutines(t, baseline, 5*time.Second)
}

// TestSkeletonOfThoughtBadInput: fields that do not combine, or no question last: 400.
func TestSkeletonOfThoughtBadInput(t *testing.T) {
	env := newSoTEnv(t)
	for _, tc := range []struct {
		extra map[string]any
		param string
	}{
		{map[string]any{"n": 2}, "skeleton_of_thought"},
		{map[string]any{"logprobs": true}, "skeleton_of_thought"},
		{map[string]any{"response_format": map[string]any{"type": "json_object"}}, "skeleton_of_thought"},
		{map[string]any{"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}}}, "skeleton_of_thought"},
		{map[string]any{"messages": []map[string]any{{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}}}, "messages"},
		{map[string]any{"max_tokens": 0}, "max_tokens"},
	} {
		b, _ := json.Marshal(sotBody(tc.extra))
		status, body := env.do(t, http.MethodPost, "/v1/chat/completions", b)
		if status != http.StatusBadRequest {
			t.Errorf("%v: status %d, want 400: %s", tc.extra, status, body)
			continue
		}
		if e := apiErrorOf(t, body); e["param"] != tc.param {
			t.Errorf("%v: param %v, want %s", tc.extra, e["param"], tc.param)
		}
	}
	waitIdle(t, env.eng, 5*time.Second)
}
