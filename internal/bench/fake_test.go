package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer is an OpenAI-compatible server that streams a fixed number of tokens with
// injected delays: the first after TTFT, each next after ITL.
type fakeServer struct {
	TTFT, ITL time.Duration
	// Tokens streamed per request (at most max_tokens).
	Tokens int
	// NoUsage leaves out the final usage chunk.
	NoUsage bool
	// Tokenize serves /tokenize and /detokenize (one token per byte).
	Tokenize bool
	// Fail answers request n (counting from 1) with this status, 0 for success.
	Fail func(n int64) int
	// MidStreamError makes request n send an error event after its first token.
	MidStreamError func(n int64) bool
	// Hang makes every request wait this long before answering.
	Hang time.Duration
	// Spec exports spec_decode counters at /metrics: per request so far, 2 drafts of 4
	// tokens, 5 accepted (2 at position 0, 2 at 1, 1 at 2, none at 3).
	Spec bool

	count atomic.Int64
	// mu guards the server-side histogram totals served at /metrics.
	mu                  sync.Mutex
	ttftSum, itlSum     float64
	ttftCount, itlCount int
	// bodies holds the decoded request bodies, by request number.
	bodies chan map[string]any
}

func newFake(t *testing.T, f *fakeServer) *httptest.Server {
	t.Helper()
	f.bodies = make(chan map[string]any, 10000)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model","root":"fake"}]}`)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		fmt.Fprintf(w, "# HELP kvasir:time_to_first_token_seconds TTFT\n# TYPE kvasir:time_to_first_token_seconds histogram\n")
		fmt.Fprintf(w, "kvasir:time_to_first_token_seconds_bucket{model_name=\"fake model {x}\",le=\"+Inf\"} %d\n", f.ttftCount)
		fmt.Fprintf(w, "kvasir:time_to_first_token_seconds_sum{model_name=\"fake model {x}\"} %g\n", f.ttftSum)
		fmt.Fprintf(w, "kvasir:time_to_first_token_seconds_count{model_name=\"fake model {x}\"} %d\n", f.ttftCount)
		fmt.Fprintf(w, "kvasir:inter_token_latency_seconds_sum %g\nkvasir:inter_token_latency_seconds_count %d 1700000000\n", f.itlSum, f.itlCount)
		if f.Spec {
			n := f.count.Load()
			fmt.Fprintf(w, "kvasir:spec_decode_num_drafts_total{model_name=\"fake\"} %d\nkvasir:spec_decode_num_draft_tokens_total{model_name=\"fake\"} %d\n", 2*n, 8*n)
			fmt.Fprintf(w, "kvasir:spec_decode_num_accepted_tokens_total{model_name=\"fake\"} %d\n", 5*n)
			for pos, per := range []int64{2, 2, 1, 0} {
				fmt.Fprintf(w, "kvasir:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"fake\",position=\"%d\"} %d\n", pos, per*n)
			}
		}
	})
	mux.HandleFunc("POST /v1/completions", f.complete)
	mux.HandleFunc("POST /v1/chat/completions", f.complete)
	if f.Tokenize {
		mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				Prompt string `json:"prompt"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			ids := []int{}
			for _, b := range []byte(req.Prompt) {
				ids = append(ids, int(b))
			}
			json.NewEncoder(w).Encode(map[string]any{"tokens": ids, "count": len(ids)})
		})
		mux.HandleFunc("POST /detokenize", func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				Tokens []int `json:"tokens"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			b := make([]byte, len(req.Tokens))
			for i, id := range req.Tokens {
				b[i] = byte(id)
			}
			json.NewEncoder(w).Encode(map[string]any{"prompt": string(b)})
		})
	}
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (f *fakeServer) complete(w http.ResponseWriter, r *http.Request) {
	n := f.count.Add(1)
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	select {
	case f.bodies <- body:
	default:
	}
	if f.Hang > 0 {
		select {
		case <-time.After(f.Hang):
		case <-r.Context().Done():
			return
		}
	}
	if f.Fail != nil {
		if code := f.Fail(n); code != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"error":{"message":"injected failure %d","type":"server_error","code":%d}}`, n, code)
			return
		}
	}
	chat := strings.Contains(r.URL.Path, "chat")
	maxTokens := f.Tokens
	if v, ok := body["max_tokens"].(float64); ok && int(v) < maxTokens {
		maxTokens = int(v)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(s string) {
		fmt.Fprintf(w, "data: %s\n\n", s)
		fl.Flush()
	}
	if chat {
		// The role announcement comes at once; it is not a token.
		send(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)
	}
	fmt.Fprint(w, ": keep-alive\n\n")
	fl.Flush()
	arrived, last := time.Now(), time.Time{}
	for i := 0; i < maxTokens; i++ {
		if i == 0 {
			time.Sleep(f.TTFT)
		} else {
			time.Sleep(f.ITL)
		}
		now := time.Now()
		f.mu.Lock()
		if i == 0 {
			f.ttftSum += now.Sub(arrived).Seconds()
			f.ttftCount++
		} else {
			f.itlSum += now.Sub(last).Seconds()
			f.itlCount++
		}
		f.mu.Unlock()
		last = now
		if i == 1 && f.MidStreamError != nil && f.MidStreamError(n) {
			send(`{"error":{"message":"injected mid-stream error","type":"server_error","code":500}}`)
			send("[DONE]")
			return
		}
		finish := "null"
		if i == maxTokens-1 {
			finish = `"length"`
		}
		if chat {
			send(fmt.Sprintf(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"t%d "},"finish_reason":%s}]}`, i, finish))
		} else {
			send(fmt.Sprintf(`{"object":"text_completion","choices":[{"index":0,"text":"t%d ","finish_reason":%s}]}`, i, finish))
		}
	}
	if !f.NoUsage {
		send(fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}}`, maxTokens, maxTokens+7))
	}
	send("[DONE]")
}
