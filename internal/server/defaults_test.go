package server

import (
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// TestSamplingDefaults: the sampling fields a request leaves out take the server's
// defaults (Config.Sampling, else the engine's); the fields it gives win.
func TestSamplingDefaults(t *testing.T) {
	d := kvasir.SamplingDefaults{Temperature: 0.6, TopP: 0.95, TopK: 20, MinP: 0.05, RepetitionPenalty: 1.1}
	var c commonRequest
	p, apiErr := c.params(nil, "max_tokens", 16, d)
	if apiErr != nil {
		t.Fatal(apiErr)
	}
	if p.Temperature != 0.6 || p.TopP != 0.95 || p.TopK != 20 || p.MinP != 0.05 || p.RepetitionPenalty != 1.1 || p.MaxTokens != 16 {
		t.Errorf("defaults not applied: %+v", p)
	}
	temp, topP, minP, rep, topK := 0.0, 1.0, 0.0, 1.0, 0
	c = commonRequest{Temperature: &temp, TopP: &topP, MinP: &minP, RepetitionPenalty: &rep, TopK: &topK}
	if p, apiErr = c.params(nil, "max_tokens", 16, d); apiErr != nil {
		t.Fatal(apiErr)
	}
	if p.Temperature != 0 || p.TopP != 1 || p.TopK != 0 || p.MinP != 0 || p.RepetitionPenalty != 1 {
		t.Errorf("request fields did not override the defaults: %+v", p)
	}

	// A server takes Config.Sampling, or the engine's defaults without it: with greedy
	// defaults a request that names no temperature gets the greedy text.
	greedy := kvasir.SamplingDefaults{Temperature: 0, TopP: 1, RepetitionPenalty: 1}
	env := newTestEnv(t, kvasir.Options{}, Config{Sampling: &greedy})
	if env.srv.sampling != greedy {
		t.Errorf("server defaults %+v, want Config.Sampling %+v", env.srv.sampling, greedy)
	}
	texts := make([]string, 2)
	for i, body := range []map[string]any{
		{"prompt": "Once upon a time", "max_tokens": 8, "ignore_eos": true},
		{"prompt": "Once upon a time", "max_tokens": 8, "ignore_eos": true, "temperature": 0},
	} {
		var res completionResponse
		env.post(t, "/v1/completions", body, &res)
		texts[i] = res.Choices[0].Text
	}
	if texts[0] != texts[1] {
		t.Errorf("greedy defaults: %q without a temperature, %q with temperature 0", texts[0], texts[1])
	}
	if plain := newTestEnv(t, kvasir.Options{}, Config{}); plain.srv.sampling != plain.eng.SamplingDefaults() {
		t.Errorf("server defaults %+v, want the engine's %+v", plain.srv.sampling, plain.eng.SamplingDefaults())
	}
}
