package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// TestKVPolicyField: kv_policy on completions and chat completions runs the request under
// the policy (with a budget above its length: the full run's text), and bad policies are
// 400s with the reason.
func TestKVPolicyField(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	body := func(extra map[string]any) map[string]any {
		m := map[string]any{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "ignore_eos": true}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	var full, streaming completionResponse
	env.post(t, "/v1/completions", body(nil), &full)
	env.post(t, "/v1/completions", body(map[string]any{"kv_policy": map[string]any{"name": "streaming", "budget_tokens": 256}}), &streaming)
	if full.Choices[0].Text != streaming.Choices[0].Text || full.Choices[0].Text == "" {
		t.Errorf("streaming within its budget: %q, full: %q", streaming.Choices[0].Text, full.Choices[0].Text)
	}
	var h2o completionResponse
	env.post(t, "/v1/completions", body(map[string]any{"kv_policy": map[string]any{"name": "h2o", "budget_tokens": 256, "sink_tokens": 0}}), &h2o)
	if h2o.Choices[0].Text != full.Choices[0].Text {
		t.Errorf("h2o within its budget: %q, full: %q", h2o.Choices[0].Text, full.Choices[0].Text)
	}
	var perHead completionResponse
	env.post(t, "/v1/completions", body(map[string]any{"kv_policy": map[string]any{"name": "snapkv", "budget_tokens": 256, "selection": "head"}}), &perHead)
	if perHead.Choices[0].Text != full.Choices[0].Text {
		t.Errorf("snapkv per head within its budget: %q, full: %q", perHead.Choices[0].Text, full.Choices[0].Text)
	}
	var chat chatResponse
	env.post(t, "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 4,
		"kv_policy": map[string]any{"name": "streaming", "budget_tokens": 64, "sink_tokens": 4, "window_tokens": 32}}, &chat)
	if len(chat.Choices) != 1 {
		t.Errorf("chat under streaming: %+v", chat)
	}
	for policy, reason := range map[string]string{
		`{"name": "lru"}`: "unknown kv policy",
		`{"name": "streaming", "budget_tokens": 32, "sink_tokens": 4, "window_tokens": 40}`: "below sink_tokens",
		`{"name": "streaming", "budget_tokens": 1.5}`:                                       "non-negative integer",
		`{"name": "streaming", "budget_tokens": "64"}`:                                      "non-negative integer",
		`{"name": "streaming", "budgets": 64}`:                                              "unknown key",
		`"streaming"`:                                                                       "expected an object",
		`{"name": "full", "budget_tokens": 64}`:                                             "takes no",
		`{"name": "h2o", "selection": "token"}`:                                             "not sequence, layer or head",
		`{"name": "h2o", "selection": 1}`:                                                   "expected sequence, layer or head",
		`{"name": "streaming", "selection": "head"}`:                                        "takes no selection",
	} {
		b := `{"prompt": "Once upon a time", "max_tokens": 4, "kv_policy": ` + policy + `}`
		status, res := env.do(t, http.MethodPost, "/v1/completions", []byte(b))
		var e struct {
			Error struct{ Message, Param string }
		}
		json.Unmarshal(res, &e)
		if status != http.StatusBadRequest || !strings.Contains(e.Error.Message, reason) {
			t.Errorf("kv_policy %s: status %d, %s; want 400 saying %q", policy, status, res, reason)
		}
	}
}
