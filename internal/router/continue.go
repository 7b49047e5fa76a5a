package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/server"
)

// stream follows a streamed reply on its way to the client, so that when its backend fails
// mid-way another can continue it: the text and the token ids sent so far. A continuation
// is a /v1/completions request whose prompt is the original prompt's token ids (as a
// backend tokenizes it, from /v1/kv_hashes) followed by the tokens already sent, with
// max_tokens reduced by their count; its chunks are rewritten into the original stream's
// shape (a chat stream gets chat chunks), under the original id.
type stream struct {
	chat     bool
	stripIDs bool        // the router asked for token_ids: the client did not
	body     []byte      // the client's request
	prompt   *promptInfo // the prompt's tokens, when known

	id, model string // the stream's, from its first chunk
	created   json.RawMessage
	text      strings.Builder // the text sent to the client
	ids       []int32         // the token ids sent
	finished  bool            // the choice's finish_reason has passed
}

// continuation is the state of one continuation's stream.
type continuation struct {
	offset int     // tokens already sent when it started (counted as output, not prompt)
	ids    []int32 // its tokens so far
	texted bool    // its first text has been written
	detok  func(ids []int32) (string, bool)
}

// relay passes an event stream from a backend to the client until [DONE], following it in
// st (nil: passed as it is) and, when cont is set, rewriting a continuation's chunks. It
// returns nil after [DONE], else the error that cut the stream.
func (r *Router) relay(w http.ResponseWriter, body io.Reader, st *stream, cont *continuation) error {
	br := bufio.NewReaderSize(body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("the stream ended before [DONE]: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		payload, isData := bytes.CutPrefix(line, []byte("data: "))
		switch {
		case len(line) == 0:
			continue
		case !isData:
			w.Write(append(line, '\n'))
			continue
		case string(payload) == "[DONE]":
			io.WriteString(w, "data: [DONE]\n\n")
			flush(w)
			return nil
		}
		out := payload
		if st != nil {
			if cont != nil {
				out = st.rewrite(payload, cont)
			} else {
				out = st.observe(payload)
			}
		}
		if out == nil {
			continue
		}
		w.Write([]byte("data: "))
		w.Write(out)
		w.Write([]byte("\n\n"))
		flush(w)
	}
}

// observe follows a chunk of the original stream and returns what the client gets: the
// chunk, without token_ids when the client did not ask for them (nil when nothing else is
// left in it).
func (st *stream) observe(payload []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(payload, &m) != nil {
		return payload
	}
	if st.id == "" {
		json.Unmarshal(m["id"], &st.id)
		json.Unmarshal(m["model"], &st.model)
		st.created = m["created"]
	}
	var choices []map[string]json.RawMessage
	if json.Unmarshal(m["choices"], &choices) != nil || len(choices) == 0 {
		return payload
	}
	idsOnly := true
	for _, c := range choices {
		var text string
		if st.chat {
			var d struct {
				Content *string `json:"content"`
				Role    string  `json:"role"`
			}
			json.Unmarshal(c["delta"], &d)
			if d.Content != nil {
				text = *d.Content
			}
			if d.Role != "" || text != "" {
				idsOnly = false
			}
		} else {
			json.Unmarshal(c["text"], &text)
		}
		var ids []int32
		json.Unmarshal(c["token_ids"], &ids)
		var finish *string
		json.Unmarshal(c["finish_reason"], &finish)
		st.text.WriteString(text)
		st.ids = append(st.ids, ids...)
		if finish != nil {
			st.finished = true
		}
		if text != "" || finish != nil || !isNull(c["logprobs"]) {
			idsOnly = false
		}
		if st.stripIDs {
			delete(c, "token_ids")
		}
	}
	if !st.stripIDs {
		return payload
	}
	if idsOnly {
		return nil
	}
	raw, _ := json.Marshal(choices)
	m["choices"] = raw
	out, err := json.Marshal(m)
	if err != nil {
		return payload
	}
	return out
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// usage is a chunk's usage object.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// rewrite turns a continuation's text_completion chunk into the original stream's next
// chunk (nil: nothing for the client).
func (st *stream) rewrite(payload []byte, cont *continuation) []byte {
	var c struct {
		ID      string          `json:"id"`
		Model   string          `json:"model"`
		Created json.RawMessage `json:"created"`
		Choices []struct {
			Text         string          `json:"text"`
			TokenIDs     []int32         `json:"token_ids"`
			FinishReason *string         `json:"finish_reason"`
			StopReason   json.RawMessage `json:"stop_reason"`
		} `json:"choices"`
		Usage *usage          `json:"usage"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(payload, &c) != nil || !isNull(c.Error) {
		return payload
	}
	if st.id == "" { // the first backend failed before its first chunk
		st.id, st.model, st.created = c.ID, c.Model, c.Created
	}
	if c.Usage != nil {
		c.Usage.PromptTokens -= cont.offset
		c.Usage.CompletionTokens += cont.offset
	}
	out := map[string]any{"id": st.id, "created": st.created, "model": st.model}
	if st.chat {
		out["object"] = "chat.completion.chunk"
	} else {
		out["object"] = "text_completion"
	}
	if c.Usage != nil {
		out["usage"] = c.Usage
	}
	choices := []map[string]any{}
	for _, ch := range c.Choices {
		cont.ids = append(cont.ids, ch.TokenIDs...)
		st.ids = append(st.ids, ch.TokenIDs...)
		text := ch.Text
		if !cont.texted && text != "" {
			// The backend decoded its first tokens as the start of a reply (dropping a
			// leading space, say); decoded after the tokens already sent they may read
			// differently.
			cont.texted = true
			if full, ok := cont.detok(st.ids); ok && strings.HasPrefix(full, st.text.String()) {
				text = full[st.text.Len():]
			}
		}
		if text == "" && ch.FinishReason == nil && (st.stripIDs || len(ch.TokenIDs) == 0) {
			continue
		}
		st.text.WriteString(text)
		if ch.FinishReason != nil {
			st.finished = true
		}
		stop := ch.StopReason
		if isNull(stop) {
			stop = json.RawMessage("null")
		}
		o := map[string]any{"index": 0, "logprobs": nil, "finish_reason": ch.FinishReason, "stop_reason": stop}
		if st.chat {
			o["delta"] = map[string]string{"content": text}
		} else {
			o["text"] = text
		}
		if !st.stripIDs {
			o["token_ids"] = ch.TokenIDs
		}
		choices = append(choices, o)
	}
	if len(choices) == 0 && c.Usage == nil {
		return nil
	}
	out["choices"] = choices
	b, err := json.Marshal(out)
	if err != nil {
		return nil
	}
	return b
}

// chatOnlyFields are the chat request's fields that a completion request does not take.
var chatOnlyFields = []string{"messages", "tools", "tool_choice", "parallel_tool_calls", "add_generation_prompt",
	"continue_final_message", "chat_template", "chat_template_kwargs", "documents", "logprobs", "top_logprobs",
	"max_completion_tokens", "reasoning_effort", "add_special_tokens"}

// continuationBody is the /v1/completions request that continues st after the tokens it
// has sent, or done when no token is left to generate.
func (st *stream) continuationBody() (body []byte, done bool, err error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(st.body, &m); err != nil {
		return nil, false, err
	}
	limit, has := -1, false
	for _, k := range []string{"max_completion_tokens", "max_tokens"} {
		if raw, ok := m[k]; ok && !isNull(raw) && (!has) && (st.chat || k == "max_tokens") {
			if err := json.Unmarshal(raw, &limit); err != nil {
				return nil, false, fmt.Errorf("%s: %w", k, err)
			}
			has = true
		}
	}
	if !st.chat && !has {
		limit, has = server.DefaultCompletionMaxTokens, true
	}
	for _, k := range chatOnlyFields {
		delete(m, k)
	}
	set := func(k string, v any) {
		raw, _ := json.Marshal(v)
		m[k] = raw
	}
	if has {
		left := limit - len(st.ids)
		if left <= 0 {
			return nil, true, nil
		}
		set("max_tokens", left)
	}
	var minTokens int
	if raw, ok := m["min_tokens"]; ok && json.Unmarshal(raw, &minTokens) == nil {
		set("min_tokens", max(minTokens-len(st.ids), 0))
	}
	set("prompt", append(append([]int32{}, st.prompt.tokenIDs...), st.ids...))
	set("stream", true)
	set("return_token_ids", true)
	set("echo", false)
	body, err = json.Marshal(m)
	return body, false, err
}

// continueStream carries on a stream whose backend failed after the chunks st has seen,
// on the other backends, until [DONE]; when it cannot, it ends the stream with an error
// event.
func (r *Router) continueStream(ctx context.Context, w http.ResponseWriter, st *stream, t target, tried map[*backend]bool, failed *backend, h http.Header) {
	fail := func(msg string) {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "service_unavailable_error", "param": nil, "code": http.StatusServiceUnavailable}})
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
		flush(w)
	}
	for ctx.Err() == nil {
		if st == nil {
			fail("the backend failed mid-stream, and this request cannot be continued elsewhere (n > 1, echo, beam search, tools or logprobs)")
			return
		}
		if st.finished {
			io.WriteString(w, "data: [DONE]\n\n")
			flush(w)
			return
		}
		if st.prompt == nil {
			st.prompt = r.promptInfo(ctx, st.chat, st.body, tried, h)
			if st.prompt == nil {
				fail("the backend failed mid-stream, and no other backend could tokenize the prompt to continue it")
				return
			}
		}
		body, done, err := st.continuationBody()
		if err != nil {
			fail("continuing the stream: " + err.Error())
			return
		}
		if done {
			st.finishLength(w)
			return
		}
		b, res, msg := r.attempt(ctx, t, tried, "/v1/completions", body, h)
		if b == nil {
			if ctx.Err() == nil {
				fail("the backend failed mid-stream, and no other could continue it: " + msg)
			}
			return
		}
		r.metrics.failovers.WithLabelValues(failed.name).Inc()
		r.metrics.requests.WithLabelValues(b.name, fmt.Sprint(res.StatusCode)).Inc()
		if res.StatusCode != http.StatusOK {
			b.inflight.Add(-1)
			whole, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
			res.Body.Close()
			fail(fmt.Sprintf("continuing the stream on %s: status %d: %s", b.name, res.StatusCode, whole))
			return
		}
		cont := &continuation{offset: len(st.ids), detok: func(ids []int32) (string, bool) { return r.detokenize(ctx, b, ids, h) }}
		err = r.relay(w, res.Body, st, cont)
		res.Body.Close()
		b.inflight.Add(-1)
		if err == nil {
			return
		}
		r.log.Warn("stream lost its backend", "backend", b.name, "err", err)
		b.markDown()
		failed = b
	}
}

// finishLength ends a stream whose token budget the failed backend used up exactly.
func (st *stream) finishLength(w http.ResponseWriter) {
	length := "length"
	c := map[string]any{"index": 0, "logprobs": nil, "finish_reason": length, "stop_reason": nil}
	out := map[string]any{"id": st.id, "created": st.created, "model": st.model, "choices": []any{c}}
	if st.chat {
		out["object"], c["delta"] = "chat.completion.chunk", map[string]any{}
	} else {
		out["object"], c["text"] = "text_completion", ""
	}
	b, _ := json.Marshal(out)
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
	flush(w)
}

// detokenize asks b for the text of ids (POST /detokenize).
func (r *Router) detokenize(ctx context.Context, b *backend, ids []int32, h http.Header) (string, bool) {
	body, _ := json.Marshal(map[string]any{"tokens": ids})
	res, err := r.post(ctx, b, "/detokenize", body, h)
	if err != nil {
		return "", false
	}
	defer res.Body.Close()
	var out struct {
		Prompt string `json:"prompt"`
	}
	if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&out) != nil {
		return "", false
	}
	return out.Prompt, true
}
