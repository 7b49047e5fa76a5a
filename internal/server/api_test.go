package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kvasir-llm/kvasir"
)

func TestCompletion(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var res completionResponse
	env.post(t, "/v1/completions", map[string]any{"model": testModelName, "prompt": "Once upon a time", "max_tokens": 6, "temperature": 0}, &res)
	if res.Object != "text_completion" || res.Model != testModelName || !strings.HasPrefix(res.ID, "cmpl-") {
		t.Errorf("header fields %+v", res)
	}
	if len(res.Choices) != 1 || res.Choices[0].Text == "" || *res.Choices[0].FinishReason != "length" {
		t.Fatalf("choices %+v", res.Choices)
	}
	if res.Usage.CompletionTokens != 6 || res.Usage.PromptTokens < 2 || res.Usage.TotalTokens != res.Usage.PromptTokens+6 {
		t.Errorf("usage %+v", res.Usage)
	}

	// The same prompt as token ids gives the same greedy text; the prefix cache reports
	// cached tokens on a repeat.
	var ids struct{ Tokens []int32 }
	env.post(t, "/tokenize", map[string]any{"prompt": "Once upon a time"}, &ids)
	var again completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": ids.Tokens, "max_tokens": 6, "temperature": 0}, &again)
	if again.Choices[0].Text != res.Choices[0].Text {
		t.Errorf("token-id prompt gave %q, text prompt %q", again.Choices[0].Text, res.Choices[0].Text)
	}

	// Two prompts with n=2: four choices, indexed prompt*n+i, usage summed.
	var multi completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": []string{"Once upon a time", "hello"}, "n": 2, "max_tokens": 3, "temperature": 0}, &multi)
	if len(multi.Choices) != 4 {
		t.Fatalf("%d choices, want 4", len(multi.Choices))
	}
	for i, c := range multi.Choices {
		if c.Index != i || c.Text == "" {
			t.Errorf("choice %d: %+v", i, c)
		}
	}
	if multi.Choices[0].Text != res.Choices[0].Text[:len(multi.Choices[0].Text)] || multi.Choices[0].Text != multi.Choices[1].Text {
		t.Errorf("greedy choices differ: %q %q (first run %q)", multi.Choices[0].Text, multi.Choices[1].Text, res.Choices[0].Text)
	}
	if multi.Usage.CompletionTokens != 12 {
		t.Errorf("usage %+v", multi.Usage)
	}

	// Echo puts the prompt in front.
	var echo completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "echo": true}, &echo)
	if echo.Choices[0].Text != "Once upon a time"+res.Choices[0].Text {
		t.Errorf("echo %q", echo.Choices[0].Text)
	}

	// List of token-id lists.
	var lists completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": [][]int32{ids.Tokens, ids.Tokens}, "max_tokens": 2, "temperature": 0}, &lists)
	if len(lists.Choices) != 2 || lists.Choices[0].Text != lists.Choices[1].Text {
		t.Errorf("token-id lists: %+v", lists.Choices)
	}
	waitIdle(t, env.eng, 5*time.Second)
}

func TestSamplingN(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var res chatResponse
	env.post(t, "/v1/chat/completions", map[string]any{
		"messages": []map[string]any{{"role": "user", "content": "hi"}}, "n": 3, "max_tokens": 8,
		"temperature": 1.0, "seed": 42, "ignore_eos": true,
	}, &res)
	if len(res.Choices) != 3 {
		t.Fatalf("%d choices", len(res.Choices))
	}
	seen := map[string]bool{}
	for i, c := range res.Choices {
		if c.Index != i || c.Message == nil || c.Message.Role != "assistant" || c.Message.text() == "" {
			t.Errorf("choice %d: %+v", i, c)
		}
		seen[c.Message.text()] = true
	}
	if len(seen) < 2 {
		t.Errorf("sampled choices are all the same: %v", seen)
	}
	var again chatResponse
	env.post(t, "/v1/chat/completions", map[string]any{
		"messages": []map[string]any{{"role": "user", "content": "hi"}}, "n": 3, "max_tokens": 8,
		"temperature": 1.0, "seed": 42, "ignore_eos": true,
	}, &again)
	for i := range res.Choices {
		if res.Choices[i].Message.text() != again.Choices[i].Message.text() {
			t.Errorf("choice %d not reproducible with a seed: %q vs %q", i, res.Choices[i].Message.text(), again.Choices[i].Message.text())
		}
	}
}

func TestChatContentParts(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var a, b chatResponse
	env.post(t, "/v1/chat/completions", map[string]any{"messages": []map[string]any{
		{"role": "user", "content": "hello\nworld"}}, "max_tokens": 5, "temperature": 0}, &a)
	env.post(t, "/v1/chat/completions", map[string]any{"messages": []map[string]any{
		{"role": "user", "content": []map[string]any{{"type": "text", "text": "hello"}, {"type": "text", "text": "world"}}}},
		"max_tokens": 5, "temperature": 0, "response_format": map[string]any{"type": "text"}}, &b)
	if a.Choices[0].Message.text() != b.Choices[0].Message.text() {
		t.Errorf("content parts render differently: %q vs %q", a.Choices[0].Message.text(), b.Choices[0].Message.text())
	}
	// /tokenize renders messages with the same template.
	var tok struct {
		Count     int
		Tokens    []int32
		TokenStrs []string `json:"token_strs"`
	}
	env.post(t, "/tokenize", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hello\nworld"}}, "return_token_strs": true}, &tok)
	if tok.Count != a.Usage.PromptTokens || len(tok.TokenStrs) != tok.Count {
		t.Errorf("tokenize count %d, chat prompt tokens %d, %d strs", tok.Count, a.Usage.PromptTokens, len(tok.TokenStrs))
	}
	var detok struct{ Prompt string }
	env.post(t, "/detokenize", map[string]any{"tokens": tok.Tokens}, &detok)
	if !strings.Contains(detok.Prompt, "<|im_start|>user\nhello\nworld<|im_end|>") {
		t.Errorf("detokenized %q", detok.Prompt)
	}
}

func TestLogprobs(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var res struct {
		Choices []struct {
			Text     string
			Logprobs struct {
				Tokens        []string
				TokenLogprobs []float64            `json:"token_logprobs"`
				TopLogprobs   []map[string]float64 `json:"top_logprobs"`
				TextOffset    []int                `json:"text_offset"`
			}
		}
	}
	env.post(t, "/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 5, "temperature": 0, "logprobs": 3, "ignore_eos": true}, &res)
	lp := res.Choices[0].Logprobs
	if len(lp.Tokens) != 5 || len(lp.TokenLogprobs) != 5 || len(lp.TopLogprobs) != 5 || len(lp.TextOffset) != 5 {
		t.Fatalf("logprobs lengths: %+v", lp)
	}
	for i := range lp.Tokens {
		if lp.TokenLogprobs[i] > 0 {
			t.Errorf("token %d: logprob %v > 0", i, lp.TokenLogprobs[i])
		}
		if n := len(lp.TopLogprobs[i]); n < 3 || n > 4 {
			t.Errorf("token %d: %d top logprobs", i, n)
		}
		// Greedy: the sampled token is the most likely one.
		for _, v := range lp.TopLogprobs[i] {
			if v > lp.TokenLogprobs[i]+1e-4 {
				t.Errorf("token %d: greedy token %v is not the best (%v)", i, lp.TokenLogprobs[i], v)
			}
		}
		if i > 0 && lp.TextOffset[i] != lp.TextOffset[i-1]+len(lp.Tokens[i-1]) {
			t.Errorf("text offsets %v for tokens %q", lp.TextOffset, lp.Tokens)
		}
	}
	if strings.Join(lp.Tokens, "") != res.Choices[0].Text {
		t.Errorf("tokens %q do not spell the text %q", lp.Tokens, res.Choices[0].Text)
	}

	var chat struct {
		Choices []struct {
			Logprobs struct {
				Content []chatTokenLogprob
			}
		}
	}
	env.post(t, "/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}},
		"max_tokens": 4, "logprobs": true, "top_logprobs": 2, "ignore_eos": true}, &chat)
	c := chat.Choices[0].Logprobs.Content
	if len(c) != 4 {
		t.Fatalf("%d chat logprobs", len(c))
	}
	for _, e := range c {
		valid := utf8.ValidString(string(bytesOf(e.Bytes)))
		if len(e.TopLogprobs) != 2 || e.Logprob > 0 || len(e.Bytes) == 0 || (valid && string(bytesOf(e.Bytes)) != e.Token) {
			t.Errorf("chat logprob %+v", e)
		}
	}
}

func bytesOf(v []int) []byte {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return b
}

func TestStopSequences(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	req := map[string]any{"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, "ignore_eos": true}
	var full completionResponse
	env.post(t, "/v1/completions", req, &full)
	text := full.Choices[0].Text
	stop := asciiPair(text[1:])
	if stop == "" {
		t.Fatalf("no two ASCII letters or digits in a row to stop at in %q", text)
	}
	want := text[:strings.Index(text, stop)]
	for _, streamed := range []bool{false, true} {
		r := map[string]any{"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, "ignore_eos": true, "stop": []string{"zzzz", stop}}
		var got, finish string
		var reason any
		if streamed {
			r["stream"] = true
			for _, ev := range env.stream(t, "/v1/completions", r) {
				if ev == "[DONE]" {
					continue
				}
				var c completionResponse
				if err := json.Unmarshal([]byte(ev), &c); err != nil {
					t.Fatal(err)
				}
				got += c.Choices[0].Text
				if c.Choices[0].FinishReason != nil {
					finish, reason = *c.Choices[0].FinishReason, c.Choices[0].StopReason
				}
			}
		} else {
			var res completionResponse
			env.post(t, "/v1/completions", r, &res)
			got, finish, reason = res.Choices[0].Text, *res.Choices[0].FinishReason, res.Choices[0].StopReason
		}
		if got != want || finish != "stop" || reason != stop {
			t.Errorf("stream=%v: text %q finish %q reason %v; want %q, stop, %q", streamed, got, finish, reason, want, stop)
		}
	}
	// A stop string given as a plain string, kept in the output when asked.
	var kept completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, "ignore_eos": true,
		"stop": stop, "include_stop_str_in_output": true}, &kept)
	if kept.Choices[0].Text != want+stop {
		t.Errorf("include_stop_str_in_output: %q, want %q", kept.Choices[0].Text, want+stop)
	}
}

// asciiPair returns the first two ASCII letters or digits in a row in s, or "".
func asciiPair(s string) string {
	alnum := func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	for i := 0; i+1 < len(s); i++ {
		if alnum(s[i]) && alnum(s[i+1]) {
			return s[i : i+2]
		}
	}
	return ""
}

func TestStreamChat(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	events := env.stream(t, "/v1/chat/completions", map[string]any{
		"messages": []map[string]any{{"role": "user", "content": "hi"}}, "n": 2, "max_tokens": 5, "ignore_eos": true,
		"stream": true, "stream_options": map[string]any{"include_usage": true},
	})
	if len(events) < 4 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	var chunks []chatResponse
	for _, ev := range events[:len(events)-1] {
		var c chatResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("%v: %s", err, ev)
		}
		if c.Object != "chat.completion.chunk" || c.ID != chunks0ID(chunks, c.ID) {
			t.Errorf("chunk header %+v", c)
		}
		chunks = append(chunks, c)
	}
	// The first chunk of each choice carries the role; the last has finish_reason.
	first := map[int]bool{}
	finished := map[int]bool{}
	text := map[int]string{}
	for _, c := range chunks[:len(chunks)-1] {
		if len(c.Choices) != 1 || c.Usage != nil {
			t.Fatalf("content chunk %+v", c)
		}
		ch := c.Choices[0]
		if finished[ch.Index] {
			t.Errorf("choice %d: chunk after finish_reason", ch.Index)
		}
		if !first[ch.Index] {
			first[ch.Index] = true
			if ch.Delta.Role != "assistant" {
				t.Errorf("choice %d: first delta %+v has no role", ch.Index, ch.Delta)
			}
		} else if ch.Delta.Role != "" {
			t.Errorf("choice %d: role repeated", ch.Index)
		}
		if ch.Delta.Content != nil {
			text[ch.Index] += *ch.Delta.Content
		}
		if ch.FinishReason != nil {
			finished[ch.Index] = true
			if *ch.FinishReason != "length" {
				t.Errorf("finish %q", *ch.FinishReason)
			}
		}
	}
	if !finished[0] || !finished[1] || text[0] == "" || text[1] == "" {
		t.Errorf("finished %v text %v", finished, text)
	}
	last := chunks[len(chunks)-1]
	if last.Choices == nil || len(last.Choices) != 0 || last.Usage == nil || last.Usage.CompletionTokens != 10 {
		t.Errorf("usage chunk %+v", last)
	}
	if !strings.Contains(events[len(events)-2], `"choices":[]`) {
		t.Errorf("usage chunk has no empty choices array: %s", events[len(events)-2])
	}
}

// chunks0ID returns the id every chunk should share.
func chunks0ID(chunks []chatResponse, id string) string {
	if len(chunks) == 0 {
		return id
	}
	return chunks[0].ID
}

func TestStreamCompletionContinuousUsage(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	events := env.stream(t, "/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 4, "ignore_eos": true, "stream": true,
		"echo": true, "logprobs": 1, "stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}})
	if events[len(events)-1] != "[DONE]" {
		t.Fatalf("no [DONE]: %q", events)
	}
	var text string
	var lastUsage *usage
	for i, ev := range events[:len(events)-1] {
		var c completionResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "text_completion" || c.Usage == nil {
			t.Fatalf("chunk %d: %s", i, ev)
		}
		if lastUsage != nil && c.Usage.CompletionTokens < lastUsage.CompletionTokens {
			t.Errorf("usage went down")
		}
		lastUsage = c.Usage
		for _, ch := range c.Choices {
			text += ch.Text
		}
	}
	if !strings.HasPrefix(text, "hello") || len(text) <= 5 || lastUsage.CompletionTokens != 4 {
		t.Errorf("text %q usage %+v", text, lastUsage)
	}
}

// TestDisconnectFreesBlocks: a client that goes away mid-stream aborts its request, and
// its KV blocks are freed at once.
func TestDisconnectFreesBlocks(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	body := []byte(`{"prompt":"hello","max_tokens":200,"ignore_eos":true,"stream":true}`)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, env.ts.URL+"/v1/completions", bytes.NewReader(body))
	res, err := env.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := io.ReadAtLeast(res.Body, buf, 10); err != nil {
		t.Fatal(err)
	}
	if s := env.eng.Stats(); s.Running != 1 || s.KVUsage == 0 {
		t.Errorf("while streaming: %+v", s)
	}
	cancel()
	res.Body.Close()
	waitIdle(t, env.eng, 2*time.Second)
	if n := env.eng.Stats().Finished[kvasir.FinishAbort]; n != 1 {
		t.Errorf("%d aborted choices, want 1", n)
	}
}

func TestMetricsHealthVersion(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{Version: "v9.9.9"})
	var res completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 4, "ignore_eos": true}, &res)
	status, body := env.do(t, http.MethodGet, "/metrics", nil)
	if status != 200 {
		t.Fatalf("metrics status %d", status)
	}
	m := string(body)
	for _, want := range []string{
		`kvasir:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 1`,
		`kvasir:inter_token_latency_seconds_count{engine="0",model_name="tiny"} 3`,
		`kvasir:e2e_request_latency_seconds_count{engine="0",model_name="tiny"} 1`,
		`kvasir:request_queue_time_seconds_count{engine="0",model_name="tiny"} 1`,
		`kvasir:num_requests_running{engine="0",model_name="tiny"} 0`,
		`kvasir:num_requests_waiting{engine="0",model_name="tiny"} 0`,
		`kvasir:kv_cache_usage_perc{engine="0",model_name="tiny"} 0`,
		`kvasir:generation_tokens_total{engine="0",model_name="tiny"} 4`,
		`kvasir:prompt_tokens_total{engine="0",model_name="tiny"} `,
		`kvasir:num_preemptions_total{engine="0",model_name="tiny"} 0`,
		`kvasir:prefix_cache_queries_total{engine="0",model_name="tiny"} `,
		`kvasir:prefix_cache_hits_total{engine="0",model_name="tiny"} `,
		`kvasir:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 1`,
		`kvasir:time_to_first_token_seconds_bucket{engine="0",model_name="tiny",le="0.001"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if status, body := env.do(t, http.MethodGet, "/health", nil); status != 200 || string(body) != "{\"status\":\"ok\"}\n" {
		t.Errorf("health %d %q", status, body)
	}
	if _, body := env.do(t, http.MethodGet, "/version", nil); !strings.Contains(string(body), `"v9.9.9"`) {
		t.Errorf("version %s", body)
	}
	var models struct {
		Object string
		Data   []struct {
			ID          string
			Object      string
			MaxModelLen int `json:"max_model_len"`
		}
	}
	_, body = env.do(t, http.MethodGet, "/v1/models", nil)
	if err := json.Unmarshal(body, &models); err != nil || models.Object != "list" || len(models.Data) != 1 ||
		models.Data[0].ID != testModelName || models.Data[0].MaxModelLen != testContextLen {
		t.Errorf("models %s (%v)", body, err)
	}
	if status, body := env.do(t, http.MethodGet, "/v1/models/"+testModelName, nil); status != 200 || !strings.Contains(string(body), `"id":"tiny"`) {
		t.Errorf("retrieve: %d %s", status, body)
	}
	if status, body := env.do(t, http.MethodGet, "/v1/models/other", nil); status != 404 {
		t.Errorf("retrieve unknown: %d %s", status, body)
	}
}

// TestServeDrains: after the serve context ends, a request in flight still completes, new
// connections are refused, and Serve returns.
func TestServeDrains(t *testing.T) {
	m := NewMetrics(testModelName)
	eng := newTinyEngine(t, kvasir.Options{OnRequestDone: m.OnRequestDone})
	srv, err := New(eng, Config{ModelNames: []string{testModelName}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, 10*time.Second) }()
	url := "http://" + ln.Addr().String()
	res, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"hello","max_tokens":60,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, 16)
	if _, err := io.ReadFull(res.Body, buf); err != nil {
		t.Fatal(err)
	}
	stop()
	rest, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("stream cut during the drain: %v", err)
	}
	if !strings.Contains(string(rest), `"finish_reason":"length"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("drained stream did not finish: %s", rest)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if _, err := http.Get(url + "/health"); err == nil {
		t.Error("the server still accepts connections after draining")
	}
	if _, err := eng.Generate(context.Background(), kvasir.Request{Prompt: "x"}); err == nil {
		t.Error("the engine still accepts requests after Serve returned")
	}
}

// TestUnknownFieldsWarn: unknown fields are ignored, with a logged warning naming them.
func TestUnknownFieldsWarn(t *testing.T) {
	var logs lockedBuffer
	env := newTestEnv(t, kvasir.Options{}, Config{Logger: slog.New(slog.NewTextHandler(&logWriter{&logs}, nil))})
	var res completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1, "frobnicate": true, "user": "u1"}, &res)
	if got := logs.String(); !strings.Contains(got, "frobnicate") || strings.Contains(got, "user") {
		t.Errorf("log %q: want a warning naming frobnicate only", got)
	}
}

// logWriter adapts lockedBuffer to io.Writer.
type logWriter struct{ b *lockedBuffer }

func (w *logWriter) Write(p []byte) (int, error) {
	w.b.WriteString(string(p))
	return len(p), nil
}
