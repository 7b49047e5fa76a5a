package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// hostileBody builds a JSON body around a long list: head, then n elements made by elem,
// then tail.
func hostileBody(head string, n int, elem func(i int) string, tail string) []byte {
	var b strings.Builder
	b.WriteString(head)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(elem(i))
	}
	b.WriteString(tail)
	return []byte(b.String())
}

// refusal is what one request cost the server until it was refused.
type refusal struct {
	status int
	err    map[string]any
	took   time.Duration
	alloc  uint64 // bytes allocated by the whole process meanwhile
}

// refuse sends body and measures the time and memory until the answer.
func refuse(t *testing.T, env *testEnv, path string, body []byte) refusal {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	status, resp := env.do(t, http.MethodPost, path, body)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	r := refusal{status: status, took: took, alloc: after.TotalAlloc - before.TotalAlloc}
	if status != http.StatusOK {
		r.err = apiErrorOf(t, resp)
	}
	return r
}

// TestHostileRequestsRefused replays the per-request cases of issue 14: each ends in a 400
// naming the parameter and the limit's flag within a second, allocating less than 50 MB
// (the body itself included).
func TestHostileRequestsRefused(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	stop := func(i int) string { // five letters: 1.1 M of them in a 9.4 MiB body
		b := []byte(`"aaaaa"`)
		for j := 5; j > 0; j, i = j-1, i/26 {
			b[j] = byte('a' + i%26)
		}
		return string(b)
	}
	message := func(i int) string { return `{"role":"user","content":"hi"}` }
	cases := []struct {
		name, path string
		body       []byte
		param      string
		msg        string
	}{
		{"1.1 M stop strings, n=16", "/v1/completions", hostileBody(`{"prompt":"x","n":16,"stop":[`, 1_100_000, stop, `]}`), "stop", "--max-stop-strings"},
		{"a 4 KiB stop string", "/v1/completions", []byte(`{"prompt":"x","stop":["` + strings.Repeat("a", 4096) + `"]}`), "stop", "--max-stop-string-bytes"},
		{"32 KiB of stop strings", "/v1/completions", hostileBody(`{"prompt":"x","stop":[`, 32, func(i int) string { return `"` + strings.Repeat("b", 1000) + `"` }, `]}`), "stop", "--max-stop-bytes"},
		{"256 prompts x n=128 x logprobs 20", "/v1/completions", hostileBody(`{"prompt":[`, 256, func(int) string { return `"hi"` }, `],"n":128,"logprobs":20,"max_tokens":16}`), "n", "--max-choices"},
		{"256 choices x 200 tokens x logprobs 20", "/v1/completions", hostileBody(`{"prompt":[`, 8, func(int) string { return `"hi"` }, `],"n":32,"logprobs":20,"max_tokens":200}`), "logprobs", "--max-response-logprobs"},
		{"a 9.5 MiB prompt", "/v1/completions", []byte(`{"prompt":"` + strings.Repeat("ka ", (19<<20)/6) + `"}`), "prompt", "--max-prompt-bytes"},
		{"a chat of 300 k messages", "/v1/chat/completions", hostileBody(`{"messages":[`, 300_000, message, `]}`), "messages", "--max-chat-messages"},
		{"a chat of 9 MiB", "/v1/chat/completions", []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat("ka ", 3<<20) + `"}]}`), "messages", "--max-prompt-bytes"},
		{"a 9.5 MiB PROMPT (the field in upper case)", "/v1/completions", []byte(`{"PROMPT":"` + strings.Repeat("ka ", (19<<20)/6) + `"}`), "prompt", "--max-prompt-bytes"},
		{"1.1 M STOP strings", "/v1/completions", hostileBody(`{"prompt":"x","Stop":[`, 1_100_000, stop, `]}`), "stop", "--max-stop-strings"},
		{"/tokenize of a 9.5 MiB prompt", "/tokenize", []byte(`{"prompt":"` + strings.Repeat("ka ", (19<<20)/6) + `"}`), "prompt", "--max-prompt-bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := refuse(t, env, c.path, c.body)
			t.Logf("%d-byte body: %d in %v, %.1f MB allocated", len(c.body), r.status, r.took.Round(time.Millisecond), float64(r.alloc)/1e6)
			if r.status != http.StatusBadRequest || r.err["param"] != c.param || !strings.Contains(fmt.Sprint(r.err["message"]), c.msg) {
				t.Fatalf("status %d, error %v: want 400 with param %q naming %s", r.status, r.err, c.param, c.msg)
			}
			if r.took > raceSlowdown*time.Second {
				t.Errorf("refused after %v: want under a second", r.took)
			}
			if r.alloc > 50e6*raceMemory {
				t.Errorf("refusing allocated %.1f MB: want under 50 MB", float64(r.alloc)/1e6)
			}
		})
	}
	waitIdle(t, env.eng, 5*time.Second)
}

// TestUnknownChatRole checks that a role outside vLLM's set is refused, naming the message.
func TestUnknownChatRole(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	for _, role := range []string{"system", "user", "assistant", "tool", "developer", "function"} {
		body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": role, "content": "hi"}}, "max_tokens": 1})
		if status, resp := env.do(t, http.MethodPost, "/v1/chat/completions", body); status != http.StatusOK {
			t.Errorf("role %q: status %d: %s", role, status, resp)
		}
	}
	status, resp := env.do(t, http.MethodPost, "/v1/chat/completions", []byte(`{"messages":[{"role":"user","content":"a"},{"role":"wizard","content":"b"}]}`))
	e := apiErrorOf(t, resp)
	if status != http.StatusBadRequest || e["param"] != "messages[1].role" || !strings.Contains(fmt.Sprint(e["message"]), `"wizard"`) {
		t.Fatalf("status %d, error %v: want 400 naming messages[1].role and the role", status, e)
	}
}

// ordinaryLatency returns the 90th percentile of the times of ordinary completions sent one
// after the other until done reports true (at least ten). (Not the median: requests that
// find the server free answer sooner, so more of them are sent than of those that wait.)
func ordinaryLatency(t *testing.T, env *testEnv, done func() bool) time.Duration {
	t.Helper()
	var times []time.Duration
	for len(times) < 10 || !done() {
		start := time.Now()
		status, body := env.do(t, http.MethodPost, "/v1/completions", []byte(`{"prompt":"Once upon a time","max_tokens":8,"ignore_eos":true}`))
		times = append(times, time.Since(start))
		if status != http.StatusOK {
			t.Fatalf("ordinary request: status %d: %s", status, body)
		}
	}
	slices.Sort(times)
	return times[len(times)*9/10]
}

// idleLatency is ordinaryLatency of 30 requests on an idle server, after a few to warm up.
func idleLatency(t *testing.T, env *testEnv) time.Duration {
	n := 0
	ordinaryLatency(t, env, func() bool { return true })
	return ordinaryLatency(t, env, func() bool { n++; return n >= 30 })
}

// besideHostile sends bodies again and again (expecting status) while ordinary requests
// run, until rounds of them are answered, and returns the ordinary requests' latency.
func besideHostile(t *testing.T, env *testEnv, path string, bodies [][]byte, status, rounds int) time.Duration {
	t.Helper()
	var answered atomic.Int64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			// Not env.do: a goroutine other than the test's may not end the test.
			res, err := env.ts.Client().Post(env.ts.URL+path, "application/json", bytes.NewReader(bodies[i%len(bodies)]))
			if err != nil {
				t.Errorf("hostile request %d: %v", i, err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != status {
				t.Errorf("hostile request %d: status %d, want %d", i, res.StatusCode, status)
			}
			answered.Add(1)
		}
	}()
	deadline := time.Now().Add(raceSlowdown * time.Minute)
	busy := ordinaryLatency(t, env, func() bool {
		select {
		case <-finished:
			return true
		default:
		}
		return answered.Load() >= int64(rounds) || time.Now().After(deadline)
	})
	close(done)
	<-finished
	if n := answered.Load(); n < int64(rounds) {
		t.Fatalf("only %d of %d hostile requests were answered meanwhile", n, rounds)
	}
	return busy
}

// TestHostileRequestsKeepLatency refuses hostile requests one after the other while
// ordinary requests run: their latency (90th percentile) stays within twice the idle server's (plus
// a little for the shared CPU).
func TestHostileRequestsKeepLatency(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	idle := idleLatency(t, env)
	bodies := [][]byte{
		hostileBody(`{"prompt":"x","n":16,"stop":[`, 1_100_000, func(i int) string { return `"abcde"` }, `]}`),
		hostileBody(`{"prompt":[`, 256, func(int) string { return `"hi"` }, `],"n":128,"logprobs":20,"max_tokens":16}`),
		[]byte(`{"prompt":"` + strings.Repeat("ka ", (19<<20)/6) + `"}`),
	}
	busy := besideHostile(t, env, "/v1/completions", bodies, http.StatusBadRequest, 3)
	t.Logf("latency %v idle, %v while hostile requests were refused", idle, busy)
	if busy > 2*idle+raceSlowdown*50*time.Millisecond {
		t.Errorf("latency %v while hostile requests were refused, %v idle: want at most twice", busy, idle)
	}
}

// TestLogprobBudget checks the bound on the logprobs of a response (1000 here) on each of
// its parts: generated tokens, prompt logprobs, echo, and a chat's max_tokens left to the
// rest of the context. The counts are entries: positions x (1 + alternatives).
func TestLogprobBudget(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{Limits: Limits{MaxResponseLogprobs: 1000}})
	ids := make([]int, 100)
	for i := range ids {
		ids[i] = 10 + i
	}
	prompt, _ := json.Marshal(ids)
	cases := []struct {
		name, path, body string
		param            string // "": accepted
	}{
		// 2 choices x 100 positions x (1 + 5) = 1200
		{"prompt_logprobs of every choice", "/v1/completions", `{"prompt":` + string(prompt) + `,"n":2,"prompt_logprobs":5,"max_tokens":1}`, "prompt_logprobs"},
		// 1 x 100 x 6 = 600
		{"prompt_logprobs of one choice", "/v1/completions", `{"prompt":` + string(prompt) + `,"prompt_logprobs":5,"max_tokens":1}`, ""},
		// 3 x 4 x 4 generated + 3 x 100 x 4 echoed = 1248
		{"echo with logprobs, n=3", "/v1/completions", `{"prompt":` + string(prompt) + `,"n":3,"echo":true,"logprobs":3,"max_tokens":4}`, "logprobs"},
		// 1 x 4 x 4 + 1 x 100 x 4 = 416
		{"echo with logprobs, n=1", "/v1/completions", `{"prompt":` + string(prompt) + `,"echo":true,"logprobs":3,"max_tokens":4}`, ""},
		// 50 x 1 x 21 = 1050, refused before the prompt is tokenized
		{"50 choices x top 20", "/v1/completions", `{"prompt":"hi","n":50,"logprobs":20,"max_tokens":1}`, "logprobs"},
		// about 240 tokens left of the 256 x 21
		{"chat top_logprobs to the end of the context", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":20}`, "logprobs"},
		// 8 x 21 = 168
		{"chat top_logprobs of 8 tokens", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":20,"max_tokens":8}`, ""},
	}
	for _, c := range cases {
		status, body := env.do(t, http.MethodPost, c.path, []byte(c.body))
		if c.param == "" {
			if status != http.StatusOK {
				t.Errorf("%s: status %d: %s", c.name, status, body)
			}
			continue
		}
		e := apiErrorOf(t, body)
		if status != http.StatusBadRequest || e["param"] != c.param || !strings.Contains(fmt.Sprint(e["message"]), "--max-response-logprobs") {
			t.Errorf("%s: status %d, error %v: want 400 naming %s and --max-response-logprobs", c.name, status, e, c.param)
		}
	}
}
