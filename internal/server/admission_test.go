package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// TestMorePromptsThanMaxWaiting sends an idle server with --max-waiting 2 a request of 5
// prompts: its prompts are admitted as one, so it is answered (it was always 429 when each
// prompt was queued on its own and the third found two waiting).
func TestMorePromptsThanMaxWaiting(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{MaxWaiting: 2, MaxNumSeqs: 1}, Config{})
	status, body := env.do(t, http.MethodPost, "/v1/completions", []byte(`{"prompt":["a","b","c","d","e"],"max_tokens":2}`))
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var res completionResponse
	if err := json.Unmarshal(body, &res); err != nil || len(res.Choices) != 5 {
		t.Fatalf("%d choices (%v): %s", len(res.Choices), err, body)
	}
}
