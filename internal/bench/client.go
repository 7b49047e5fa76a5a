package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// RequestOutput is what one benchmark request measured, as vLLM's RequestFuncOutput.
type RequestOutput struct {
	Success bool
	Error   string
	// PromptLen is the input token count: the server's usage, else the dataset's.
	PromptLen int
	// OutputTokens is the generated token count: the server's usage, else counted by the
	// local tokenizer, else the number of token-bearing chunks.
	OutputTokens int
	// UsageReported is set when the server reported completion_tokens.
	UsageReported bool
	// TTFT is the time from sending to the first token-bearing chunk.
	TTFT time.Duration
	// ITL holds the gaps between consecutive token-bearing chunks.
	ITL []time.Duration
	// Latency is the time from sending to the last token-bearing chunk.
	Latency time.Duration
	// Start is when the request was sent, from the benchmark's start.
	Start time.Duration
	// QueueTime is how long the request waited for a --max-concurrency slot.
	QueueTime     time.Duration
	GeneratedText string
}

// Client sends benchmark requests to an OpenAI-compatible server and times the streams.
type Client struct {
	HTTP     *http.Client
	BaseURL  string // such as http://127.0.0.1:8000
	Endpoint string // /v1/completions or /v1/chat/completions
	Model    string
	APIKey   string
	// IgnoreEOS asks the server to generate max_tokens tokens (a vLLM extension).
	IgnoreEOS bool
	// Timeout bounds each request (0: none).
	Timeout time.Duration
	// Tok counts output tokens when the server reports no usage; may be nil.
	Tok Tokenizer
}

// Chat reports whether the endpoint is the chat completions API.
func (c *Client) Chat() bool { return strings.HasSuffix(c.Endpoint, "chat/completions") }

// maxSSELine bounds one line of the event stream.
const maxSSELine = 16 << 20

// body returns the JSON body of a streaming request for r.
func (c *Client) body(r SampleRequest) ([]byte, error) {
	p := map[string]any{
		"model":          c.Model,
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
	}
	if c.Chat() {
		p["messages"] = []map[string]any{{"role": "user", "content": r.Prompt}}
		p["max_completion_tokens"] = r.OutputLen
		p["max_tokens"] = r.OutputLen
	} else {
		if r.TokenIDs != nil {
			p["prompt"] = r.TokenIDs
		} else {
			p["prompt"] = r.Prompt
		}
		p["max_tokens"] = r.OutputLen
	}
	if c.IgnoreEOS {
		p["ignore_eos"] = true
	}
	return json.Marshal(p)
}

// Send sends r, streams the answer and returns what it measured. It never panics on a bad
// answer; every failure is reported in the output's Error. start is the benchmark's start.
func (c *Client) Send(ctx context.Context, r SampleRequest, start time.Time) RequestOutput {
	out := RequestOutput{PromptLen: r.PromptLen}
	body, err := c.body(r)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	url := strings.TrimRight(c.BaseURL, "/") + c.Endpoint
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		out.Error = err.Error()
		return out
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	st := time.Now()
	out.Start = st.Sub(start)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		out.Error = fmt.Sprintf("POST %s: %v", c.Endpoint, err)
		return out
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		out.Error = fmt.Sprintf("POST %s: %s: %s", c.Endpoint, resp.Status, errorMessage(data))
		return out
	}
	s := streamState{chat: c.Chat(), start: st, last: st}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		// A server that ignored "stream": one answer, all tokens at once.
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxSSELine))
		if err == nil {
			err = s.event(data, time.Now(), true)
		}
		s.err = err
	} else {
		s.err = s.read(resp.Body)
	}
	out.TTFT, out.ITL, out.GeneratedText = s.ttft, s.itl, s.text.String()
	out.Latency = s.last.Sub(st)
	if s.promptTokens > 0 {
		out.PromptLen = s.promptTokens
	}
	switch {
	case s.usageTokens > 0:
		out.OutputTokens, out.UsageReported = s.usageTokens, true
	case c.Tok != nil && out.GeneratedText != "":
		out.OutputTokens = len(c.Tok.Encode(out.GeneratedText))
	default:
		out.OutputTokens = s.chunks
	}
	switch {
	case s.err != nil:
		out.Error = fmt.Sprintf("POST %s: stream: %v", c.Endpoint, s.err)
	case s.chunks == 0:
		out.Error = "never received a token-bearing chunk to time the first token"
	default:
		out.Success = true
	}
	return out
}

// streamState follows one response stream.
type streamState struct {
	chat        bool
	start, last time.Time
	ttft        time.Duration
	itl         []time.Duration
	chunks      int
	text        strings.Builder

	usageTokens, promptTokens int
	err                       error
}

// read consumes an event stream. Each data line that holds a whole JSON value is an event
// at the time it was read (OpenAI servers send one per event); multi-line data is joined
// and dispatched at the blank line that ends the event.
func (s *streamState) read(body io.Reader) error {
	br := bufio.NewReaderSize(body, 64<<10)
	var pending []byte
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line[:0], chunk...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(line) > maxSSELine {
				return fmt.Errorf("a line over %d bytes", maxSSELine)
			}
			chunk, err = br.ReadSlice('\n')
			line = append(line, chunk...)
		}
		now := time.Now()
		if len(line) > 0 {
			l := ParseSSELine(line)
			switch l.Kind {
			case SSEData:
				if len(pending) == 0 && json.Valid(l.Data) {
					if e := s.event(l.Data, now, false); e != nil {
						return e
					}
				} else {
					if len(pending) > 0 {
						pending = append(pending, '\n')
					}
					pending = append(pending, l.Data...)
				}
			case SSEBlank:
				if len(pending) > 0 {
					if e := s.event(pending, now, false); e != nil {
						return e
					}
					pending = pending[:0]
				}
			case SSEDone:
				return nil
			}
		}
		if err == io.EOF {
			if len(pending) > 0 {
				return s.event(pending, now, false)
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// streamChunk is the part of a completion chunk (or whole answer) the benchmark reads.
type streamChunk struct {
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Role             string  `json:"role"`
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
		} `json:"delta"`
		Message *struct {
			Content *string `json:"content"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// event handles one event's data at time now. A chunk counts as a token when its first
// choice carries text, or (as vLLM counts special tokens) carries no text and no
// finish_reason; a chat chunk that only announces the role does not count, nor does an
// empty closing chunk that only gives the finish reason.
func (s *streamState) event(data []byte, now time.Time, whole bool) error {
	var c streamChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("bad chunk %.200q: %w", data, err)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return fmt.Errorf("server error: %s", errorMessage(data))
	}
	if c.Usage != nil {
		if c.Usage.CompletionTokens > 0 {
			s.usageTokens = c.Usage.CompletionTokens
		}
		if c.Usage.PromptTokens > 0 {
			s.promptTokens = c.Usage.PromptTokens
		}
	}
	if len(c.Choices) == 0 {
		return nil
	}
	ch := c.Choices[0]
	text, role := "", ""
	switch {
	case ch.Text != nil:
		text = *ch.Text
	case ch.Delta != nil:
		role = ch.Delta.Role
		for _, p := range []*string{ch.Delta.ReasoningContent, ch.Delta.Reasoning, ch.Delta.Content} {
			if p != nil {
				text += *p
			}
		}
	case ch.Message != nil && ch.Message.Content != nil:
		text = *ch.Message.Content
	}
	if text == "" && (role != "" || ch.FinishReason != nil) && !whole {
		return nil
	}
	if s.chunks == 0 {
		s.ttft = now.Sub(s.start)
	} else {
		s.itl = append(s.itl, now.Sub(s.last))
	}
	s.last = now
	s.chunks++
	s.text.WriteString(text)
	return nil
}

// errorMessage extracts the message of an OpenAI-style error body
// ({"error": {"message": ...}} or {"error": "..."} or {"message": ...}), else returns the
// body itself, shortened.
func errorMessage(data []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(data, &e) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(e.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case json.Unmarshal(e.Error, &s) == nil && s != "":
			return s
		case e.Message != "":
			return e.Message
		}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}
