package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/chat"
)

// hostileCases are the chat template bodies of the table that killed or hung the
// server, with the limits each may end on.
var hostileCases = []struct {
	name, body string
	limits     []chat.Limit
}{
	{"recursion", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, []chat.Limit{chat.LimitDepth}},
	{"string", `{{ 'a' * 1000000000 }}`, []chat.Limit{chat.LimitMemory}},
	{"range", `{% for i in range(100000000) %}{% endfor %}`, []chat.Limit{chat.LimitIterations}},
	{"loops", `{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}{% endfor %}`, []chat.Limit{chat.LimitIterations}},
}

// testTemplateLimits are the default limits but for loop iterations, lowered so that a
// loaded machine meets that limit before the deadline; hostileSlack is how long past the
// deadline a hostile request may end (a worker's start and kill take time under load).
var (
	testTemplateLimits = chat.Limits{MaxIterations: 20_000}
	hostileSlack       = 2 * time.Second
)

// trojanTemplate is ChatML, but with chat_template_kwargs {"case": NAME} it runs that
// hostile case (and with "slow" it filters numbers for a minute): it renders the load's
// one-message conversation, and a request turns it hostile.
func trojanTemplate() string {
	var b strings.Builder
	for _, c := range hostileCases {
		fmt.Fprintf(&b, "{%% if case == '%s' %%}%s{%% endif %%}", c.name, c.body)
	}
	b.WriteString(`{% if case == 'slow' %}{% for i in range(100000) %}{{ range(1000000) | sum }}{% endfor %}{% endif %}`)
	return b.String() + testChatTemplate
}

// TestHostileChatTemplateRefused: a server whose chat template (in the model or from
// --chat-template) cannot render a one-message conversation within the limits is not
// made: New's error names the limit, within about a second.
func TestHostileChatTemplateRefused(t *testing.T) {
	eng := newTinyEngine(t, kvasir.Options{})
	for _, c := range hostileCases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			srv, err := New(eng, Config{ChatTemplate: c.body, ChatTemplateLimits: testTemplateLimits, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err == nil {
				srv.Close()
				t.Fatal("the server was made")
			}
			var le *chat.LimitError
			if !errors.As(err, &le) || !containsLimit(c.limits, le.Limit) || !strings.Contains(err.Error(), string(le.Limit)) {
				t.Fatalf("error %v, want one of the limits %v named", err, c.limits)
			}
			if d := time.Since(start); d > chat.DefaultTimeout+hostileSlack {
				t.Errorf("refused after %v, want about a second at most", d)
			}
		})
	}
}

// containsLimit reports whether l is one of limits.
func containsLimit(limits []chat.Limit, l chat.Limit) bool {
	for _, x := range limits {
		if x == l {
			return true
		}
	}
	return false
}

// TestHostileChatRequests: each hostile case met by a request (chat or /tokenize) is a
// 400 naming the limit and its flag, within about the deadline (one second), while the server stays up:
// /health answers, an ordinary chat completes, and this process's heap stays bounded.
func TestHostileChatRequests(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{ChatTemplate: trojanTemplate(), ChatTemplateWorkers: 2, ChatTemplateLimits: testTemplateLimits})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, c := range hostileCases {
		for _, path := range []string{"/v1/chat/completions", "/tokenize"} {
			t.Run(c.name+path, func(t *testing.T) {
				body, _ := json.Marshal(map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}},
					"max_tokens": 2, "chat_template_kwargs": map[string]any{"case": c.name}})
				start := time.Now()
				status, resp := env.do(t, http.MethodPost, path, body)
				if d := time.Since(start); d > chat.DefaultTimeout+hostileSlack {
					t.Errorf("answered after %v, want about a second at most", d)
				}
				if status != http.StatusBadRequest {
					t.Fatalf("status %d, want 400: %s", status, resp)
				}
				e := apiErrorOf(t, resp)
				msg, _ := e["message"].(string)
				named := false
				for _, l := range c.limits {
					named = named || strings.Contains(msg, string(l)) && strings.Contains(msg, chatLimitFlags[l])
				}
				if e["param"] != "messages" || e["code"] != "chat_template_limit_exceeded" || !named {
					t.Errorf("error %v, want param messages naming one of the limits %v and its flag", e, c.limits)
				}
				if status, _ := env.do(t, http.MethodGet, "/health", nil); status != http.StatusOK {
					t.Errorf("/health: %d", status)
				}
			})
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 50<<20 {
		t.Errorf("the server's heap grew by %d MiB", grown>>20)
	}
	var res chatResponse
	env.post(t, "/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 2}, &res)
	if len(res.Choices) != 1 {
		t.Errorf("an ordinary chat after them: %+v", res)
	}
}

// TestChatRenderCancelled: a client that goes away mid-render stops the render: with one
// sandbox worker and a minute's deadline, a request turned slow and abandoned after
// 200 ms leaves the next request to be served at once, on a worker that replaced the
// killed one.
func TestChatRenderCancelled(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{ChatTemplate: trojanTemplate(), ChatTemplateWorkers: 1,
		ChatTemplateLimits: chat.Limits{Timeout: time.Minute, MaxMemoryBytes: 512 << 20, MaxIterations: 1 << 40}})
	body, _ := json.Marshal(map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}},
		"max_tokens": 2, "chat_template_kwargs": map[string]any{"case": "slow"}})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.ts.URL+"/v1/chat/completions", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if res, err := env.ts.Client().Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("the slow render answered %d", res.StatusCode)
	}
	start := time.Now()
	var res chatResponse
	env.post(t, "/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 2}, &res)
	if d := time.Since(start); d > 5*time.Second || len(res.Choices) != 1 {
		t.Errorf("the next request took %v (%+v): the abandoned render still ran", d, res)
	}
}
