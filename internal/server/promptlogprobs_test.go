package server

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// promptEntry is one decoded prompt_logprobs entry: token id (a string key) to its logprob,
// rank and text; nil for the first prompt token.
type promptEntry map[string]struct {
	Logprob      float64
	Rank         int
	DecodedToken string `json:"decoded_token"`
}

// legacyOut is a decoded completions logprobs object.
type legacyOut struct {
	Tokens        []string
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// TestPromptLogprobsMatchGreedy: the prompt logprobs of a prompt that ends with a greedy
// completion's tokens are, bit for bit, the logprobs that completion reported for them (Q8_0
// weights give the same bits however the tokens are batched), each greedy token has rank 1,
// and the alternatives are the ones the greedy run saw; every entry names its prompt token,
// with a rank that agrees with its alternatives; the first prompt token's entry is null.
func TestPromptLogprobsMatchGreedy(t *testing.T) {
	env := newTestEnvOf(t, kvasir.Options{}, Config{}, quant.Q8_0)
	var tok struct{ Tokens []int32 }
	env.post(t, "/tokenize", map[string]any{"prompt": "Once upon a time"}, &tok)
	prompt := tok.Tokens
	const gen = 8
	var greedy struct {
		Choices []struct{ Logprobs legacyOut }
	}
	env.post(t, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": gen, "temperature": 0, "logprobs": 2, "ignore_eos": true}, &greedy)
	reported := greedy.Choices[0].Logprobs.TokenLogprobs
	if len(reported) != gen {
		t.Fatalf("%d greedy logprobs, want %d", len(reported), gen)
	}
	// The completions API reports token texts, not ids: the same greedy run through the
	// engine gives the ids (and must report the same logprobs).
	run := generateDirect(t, env.eng, kvasir.Request{PromptTokens: prompt, Params: kvasir.SamplingParams{MaxTokens: gen, IgnoreEOS: true, Logprobs: true, TopLogprobs: 2}})
	for j, lp := range run.logprobs {
		if reported[j] == nil || *reported[j] != float64(lp.Token.Logprob) {
			t.Fatalf("token %d: the server reported %v, the engine %v", j, reported[j], lp.Token.Logprob)
		}
	}

	full := append(slices.Clone(prompt), run.tokens...)
	var res struct {
		Choices []struct {
			PromptLogprobs []promptEntry `json:"prompt_logprobs"`
		}
		Usage usage
	}
	env.post(t, "/v1/completions", map[string]any{"prompt": full, "max_tokens": 1, "prompt_logprobs": 2}, &res)
	plps := res.Choices[0].PromptLogprobs
	if len(plps) != len(full) || plps[0] != nil {
		t.Fatalf("%d prompt logprobs for %d prompt tokens, first %v: want one per token, the first null", len(plps), len(full), plps)
	}
	if res.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("a prompt-logprobs request took %d cached tokens", res.Usage.PromptTokensDetails.CachedTokens)
	}
	for i := 1; i < len(full); i++ {
		e := plps[i]
		own, ok := e[strconv.Itoa(int(full[i]))]
		if !ok || len(e) < 1 || len(e) > 3 || own.Logprob > 0 || own.Rank < 1 {
			t.Fatalf("entry %d (token %d): %v", i, full[i], e)
		}
		// The token and its 2 alternatives: 3 entries when it is not among them, and
		// then both alternatives are more likely.
		if len(e) == 3 {
			for id, alt := range e {
				if id != strconv.Itoa(int(full[i])) && (alt.Logprob < own.Logprob || alt.Rank > 2) {
					t.Errorf("entry %d: alternative %s %+v next to token %+v", i, id, alt, own)
				}
			}
			if own.Rank < 3 {
				t.Errorf("entry %d: token of rank %d is not among the 2 most likely", i, own.Rank)
			}
		} else if own.Rank > 2 {
			t.Errorf("entry %d: token of rank %d is among the 2 most likely", i, own.Rank)
		}
	}
	for j, lp := range run.logprobs {
		e := plps[len(prompt)+j]
		own := e[strconv.Itoa(int(run.tokens[j]))]
		if own.Logprob != *reported[j] || own.Rank != 1 || own.DecodedToken != validText(env.eng.TokenText(run.tokens[j])) {
			t.Errorf("greedy token %d (%d): prompt logprob %+v, the completion reported %v (rank 1, %q)", j, run.tokens[j], own, *reported[j], env.eng.TokenText(run.tokens[j]))
		}
		if len(e) != len(lp.Top) {
			t.Errorf("greedy token %d: %d prompt entries, the run had %d alternatives (itself among them)", j, len(e), len(lp.Top))
		}
		for r, alt := range lp.Top {
			got, ok := e[strconv.Itoa(int(alt.ID))]
			if !ok || got.Logprob != float64(alt.Logprob) || got.Rank != r+1 {
				t.Errorf("greedy token %d: alternative %d (%d, %v) is %+v in the prompt logprobs", j, r, alt.ID, alt.Logprob, got)
			}
		}
	}

	// Chat puts them at the top level, one per rendered prompt token.
	var chat struct {
		PromptLogprobs []promptEntry `json:"prompt_logprobs"`
		Usage          usage
	}
	env.post(t, "/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 1, "prompt_logprobs": 0}, &chat)
	if len(chat.PromptLogprobs) != chat.Usage.PromptTokens || chat.PromptLogprobs[0] != nil {
		t.Fatalf("chat: %d prompt logprobs for %d prompt tokens", len(chat.PromptLogprobs), chat.Usage.PromptTokens)
	}
	for i, e := range chat.PromptLogprobs[1:] {
		if len(e) != 1 {
			t.Errorf("chat entry %d: %v, want the prompt token alone with prompt_logprobs 0", i+1, e)
		}
	}
}

// validText is s as JSON carries it (invalid UTF-8 bytes become U+FFFD).
func validText(s string) string {
	b, _ := json.Marshal(s)
	var out string
	json.Unmarshal(b, &out)
	return out
}

// directRun is one choice generated through the engine itself.
type directRun struct {
	tokens   []int32
	logprobs []kvasir.Logprob
}

// generateDirect runs req on the engine and returns its choice 0.
func generateDirect(t *testing.T, eng *kvasir.Engine, req kvasir.Request) directRun {
	t.Helper()
	ch, err := eng.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var run directRun
	for o := range ch {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if o.Index == 0 {
			run.tokens = append(run.tokens, o.TokenIDs...)
			run.logprobs = append(run.logprobs, o.Logprobs...)
		}
	}
	return run
}

// TestEchoLogprobs: echo with logprobs puts the prompt tokens in front of the generated ones
// in the legacy logprobs object, the first with null logprob and alternatives, the others
// with the logprobs prompt_logprobs gives them; text offsets run over all tokens. Streamed,
// each choice's first chunk is its echoed prompt with those logprobs, and the chunks add up
// to the unstreamed object.
func TestEchoLogprobs(t *testing.T) {
	env := newTestEnvOf(t, kvasir.Options{}, Config{}, quant.Q8_0)
	var tok struct{ Tokens []int32 }
	env.post(t, "/tokenize", map[string]any{"prompt": "hello"}, &tok)
	ids := tok.Tokens
	type choice struct {
		Text           string
		Logprobs       legacyOut
		PromptLogprobs []promptEntry `json:"prompt_logprobs"`
	}
	var plain, echoed struct{ Choices []choice }
	req := map[string]any{"prompt": "hello", "max_tokens": 3, "temperature": 0, "logprobs": 1, "ignore_eos": true}
	env.post(t, "/v1/completions", req, &plain)
	req["echo"] = true
	req["prompt_logprobs"] = 1
	env.post(t, "/v1/completions", req, &echoed)
	got, gen := echoed.Choices[0].Logprobs, plain.Choices[0].Logprobs
	if echoed.Choices[0].Text != "hello"+plain.Choices[0].Text {
		t.Errorf("echoed text %q, want %q", echoed.Choices[0].Text, "hello"+plain.Choices[0].Text)
	}
	n := len(ids) + 3
	if len(got.Tokens) != n || len(got.TokenLogprobs) != n || len(got.TopLogprobs) != n || len(got.TextOffset) != n {
		t.Fatalf("echo logprobs of %d prompt + 3 tokens: %+v", len(ids), got)
	}
	if got.TokenLogprobs[0] != nil || got.TopLogprobs[0] != nil || got.Tokens[0] != validText(env.eng.TokenText(ids[0])) {
		t.Errorf("first prompt token %q: logprob %v, top %v; want %q with nulls", got.Tokens[0], got.TokenLogprobs[0], got.TopLogprobs[0], env.eng.TokenText(ids[0]))
	}
	plps := echoed.Choices[0].PromptLogprobs
	for i := 1; i < n; i++ {
		if got.TokenLogprobs[i] == nil || len(got.TopLogprobs[i]) < 1 || len(got.TopLogprobs[i]) > 2 {
			t.Fatalf("token %d: logprob %v, top %v", i, got.TokenLogprobs[i], got.TopLogprobs[i])
		}
		var want float64
		if i < len(ids) {
			want = plps[i][strconv.Itoa(int(ids[i]))].Logprob
		} else {
			want = *gen.TokenLogprobs[i-len(ids)]
		}
		if *got.TokenLogprobs[i] != want {
			t.Errorf("token %d: logprob %v, want %v", i, *got.TokenLogprobs[i], want)
		}
	}
	if !slices.Equal(got.Tokens[len(ids):], gen.Tokens) {
		t.Errorf("generated tokens %q, without echo %q", got.Tokens[len(ids):], gen.Tokens)
	}
	offset := 0
	for i, text := range got.Tokens {
		if got.TextOffset[i] != offset {
			t.Fatalf("text offsets %v for tokens %q", got.TextOffset, got.Tokens)
		}
		offset += len(text)
	}

	// Streamed with n=2 (both greedy, so both equal the unstreamed choice).
	req["n"], req["stream"] = 2, true
	delete(req, "prompt_logprobs")
	streamed := map[int]*legacyOut{}
	texts := map[int]string{}
	for _, ev := range env.stream(t, "/v1/completions", req) {
		if ev == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Index    int
				Text     string
				Logprobs legacyOut
			}
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		ch := c.Choices[0]
		s := streamed[ch.Index]
		if s == nil {
			if ch.Text != "hello" || len(ch.Logprobs.Tokens) != len(ids) {
				t.Errorf("choice %d: first chunk %q with %d tokens, want the echoed prompt's %d", ch.Index, ch.Text, len(ch.Logprobs.Tokens), len(ids))
			}
			s = &legacyOut{}
			streamed[ch.Index] = s
		}
		texts[ch.Index] += ch.Text
		s.Tokens = append(s.Tokens, ch.Logprobs.Tokens...)
		s.TokenLogprobs = append(s.TokenLogprobs, ch.Logprobs.TokenLogprobs...)
		s.TopLogprobs = append(s.TopLogprobs, ch.Logprobs.TopLogprobs...)
		s.TextOffset = append(s.TextOffset, ch.Logprobs.TextOffset...)
	}
	want, _ := json.Marshal(got)
	for i := range 2 {
		b, _ := json.Marshal(streamed[i])
		if string(b) != string(want) || texts[i] != echoed.Choices[0].Text {
			t.Errorf("streamed choice %d: %q\n%s\nwant %q\n%s", i, texts[i], b, echoed.Choices[0].Text, want)
		}
	}
}

// TestPromptPositionJSON: a position is an object keyed by token id in its own order, the
// prompt token first; a nil position is null; -Inf becomes -9999 as in vLLM.
func TestPromptPositionJSON(t *testing.T) {
	p := promptLogprobs{nil, {{id: 17, Logprob: -0.5, Rank: 2, DecodedToken: "a"}, {id: 3, Logprob: -0.25, Rank: 1, DecodedToken: "\"b"}}}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	const want = `[null,{"17":{"logprob":-0.5,"rank":2,"decoded_token":"a"},"3":{"logprob":-0.25,"rank":1,"decoded_token":"\"b"}}]`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	env := newTestEnv(t, kvasir.Options{}, Config{})
	inf := float32(math.Inf(-1))
	got := env.srv.promptLogprobs([]kvasir.Logprob{{Token: kvasir.TokenLogprob{ID: 5, Logprob: inf}, Rank: 320,
		Top: []kvasir.TokenLogprob{{ID: 9, Logprob: -1}, {ID: 8, Logprob: -1}, {ID: 7, Logprob: -2}}}}, 3)
	wantPos := promptPosition{{id: 5, Logprob: -9999, Rank: 320, DecodedToken: env.eng.TokenText(5)},
		{id: 9, Logprob: -1, Rank: 1, DecodedToken: env.eng.TokenText(9)}, {id: 8, Logprob: -1, Rank: 1, DecodedToken: env.eng.TokenText(8)},
		{id: 7, Logprob: -2, Rank: 3, DecodedToken: env.eng.TokenText(7)}}
	if len(got) != 2 || got[0] != nil || !slices.Equal(got[1], wantPos) {
		t.Errorf("promptLogprobs: %+v, want [nil %+v]", got, wantPos)
	}
}
