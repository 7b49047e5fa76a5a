package server

import (
	"encoding/json"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// TestBeamSearch: a beam of width 1 is greedy decoding; width 3 gives 3 distinct choices in
// score order (with every beam as long as the others, the order of their summed logprobs),
// with usage counting the returned beams' tokens; streamed, each beam comes as one chunk
// with its whole text and finish_reason. Chat does the same.
func TestBeamSearch(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	const gen = 6
	base := func(extra map[string]any) map[string]any {
		r := map[string]any{"prompt": "Once upon a time", "max_tokens": gen, "ignore_eos": true}
		for k, v := range extra {
			r[k] = v
		}
		return r
	}
	var greedy, one completionResponse
	env.post(t, "/v1/completions", base(map[string]any{"temperature": 0}), &greedy)
	env.post(t, "/v1/completions", base(map[string]any{"use_beam_search": true}), &one)
	if len(one.Choices) != 1 || one.Choices[0].Text != greedy.Choices[0].Text {
		t.Errorf("beam width 1: %+v, greedy %q", one.Choices, greedy.Choices[0].Text)
	}

	var beams struct {
		Choices []struct {
			Index        int
			Text         string
			FinishReason string `json:"finish_reason"`
			Logprobs     legacyOut
		}
		Usage usage
	}
	env.post(t, "/v1/completions", base(map[string]any{"use_beam_search": true, "n": 3, "logprobs": 0, "length_penalty": 0.5}), &beams)
	if len(beams.Choices) != 3 {
		t.Fatalf("%d choices, want 3", len(beams.Choices))
	}
	seen := map[string]bool{}
	prev := 0.0
	for i, c := range beams.Choices {
		if c.Index != i || c.FinishReason != "length" || len(c.Logprobs.TokenLogprobs) != gen || seen[c.Text] {
			t.Errorf("choice %d: %+v (texts so far %v)", i, c, seen)
		}
		seen[c.Text] = true
		sum := 0.0
		for _, v := range c.Logprobs.TokenLogprobs {
			sum += *v
		}
		if i > 0 && sum > prev+1e-4 {
			t.Errorf("choice %d: summed logprob %v above choice %d's %v", i, sum, i-1, prev)
		}
		prev = sum
	}
	if beams.Usage.CompletionTokens != 3*gen {
		t.Errorf("usage %+v, want %d completion tokens", beams.Usage, 3*gen)
	}

	// Streamed: one chunk per beam, best first, each whole.
	events := env.stream(t, "/v1/completions", base(map[string]any{"use_beam_search": true, "n": 3, "length_penalty": 0.5, "stream": true,
		"stream_options": map[string]any{"include_usage": true}}))
	if len(events) != 5 || events[4] != "[DONE]" {
		t.Fatalf("events %q: want 3 beams, usage, [DONE]", events)
	}
	for i, ev := range events[:3] {
		var c completionResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		got := c.Choices[0]
		if got.Index != i || got.Text != beams.Choices[i].Text || got.FinishReason == nil || *got.FinishReason != "length" {
			t.Errorf("chunk %d: %+v, want beam %d %q", i, got, i, beams.Choices[i].Text)
		}
	}
	var last completionResponse
	if err := json.Unmarshal([]byte(events[3]), &last); err != nil || last.Usage == nil || last.Usage.CompletionTokens != 3*gen {
		t.Errorf("usage chunk %s (%v)", events[3], err)
	}

	// Chat: the beams as choices; streamed, a role chunk per choice, then one chunk per beam.
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	var chat chatResponse
	env.post(t, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": gen, "ignore_eos": true, "use_beam_search": true, "n": 2}, &chat)
	if len(chat.Choices) != 2 || chat.Choices[0].Message.text() == chat.Choices[1].Message.text() || chat.Usage.CompletionTokens != 2*gen {
		t.Fatalf("chat beams %+v, usage %+v", chat.Choices, chat.Usage)
	}
	events = env.stream(t, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": gen, "ignore_eos": true, "use_beam_search": true, "n": 2, "stream": true})
	if len(events) != 5 {
		t.Fatalf("chat events %q: want 2 role chunks, 2 beams, [DONE]", events)
	}
	for i, ev := range events[2:4] {
		var c chatResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		got := c.Choices[0]
		if got.Index != i || got.Delta.Content == nil || *got.Delta.Content != chat.Choices[i].Message.text() || got.FinishReason == nil {
			t.Errorf("chat chunk %d: %+v, want beam %d %q", i, got, i, chat.Choices[i].Message.text())
		}
	}
}

// TestBeamSearchParams: use_beam_search turns beam search on with vLLM's length_penalty
// of 1 unless one is given; without it length_penalty changes nothing; a length_penalty a
// float32 cannot hold is refused.
func TestBeamSearchParams(t *testing.T) {
	half, huge := 0.5, 1e300
	for _, tc := range []struct {
		name    string
		req     commonRequest
		beam    bool
		penalty float32
		bad     bool
	}{
		{name: "off", req: commonRequest{}},
		{name: "length_penalty alone", req: commonRequest{LengthPenalty: &half}},
		{name: "default penalty", req: commonRequest{UseBeamSearch: true}, beam: true, penalty: 1},
		{name: "given penalty", req: commonRequest{UseBeamSearch: true, LengthPenalty: &half}, beam: true, penalty: 0.5},
		{name: "overflowing penalty", req: commonRequest{UseBeamSearch: true, LengthPenalty: &huge}, bad: true},
	} {
		var p kvasir.SamplingParams
		err := tc.req.beamSearchParams(&p)
		if tc.bad {
			if err == nil || err.Param != "length_penalty" {
				t.Errorf("%s: error %v, want one naming length_penalty", tc.name, err)
			}
			continue
		}
		if err != nil || p.UseBeamSearch != tc.beam || p.LengthPenalty != tc.penalty {
			t.Errorf("%s: %v, beam %v penalty %v; want beam %v penalty %v", tc.name, err, p.UseBeamSearch, p.LengthPenalty, tc.beam, tc.penalty)
		}
	}
}
