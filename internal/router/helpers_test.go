package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/server"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// testChatTemplate is ChatML.
const testChatTemplate = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}`

// instance is one kvasir serve instance on loopback, on a tiny synthesized model (the same
// weights in every instance), that a test can kill.
type instance struct {
	eng  *kvasir.Engine
	ts   *httptest.Server
	dead atomic.Bool
	// trip, when set and positive, kills the first instance sharing it to have written
	// that many stream events, and goes to zero.
	trip   atomic.Pointer[atomic.Int64]
	events atomic.Int64
}

// newInstance starts an instance whose KV cache holds kvTokens tokens.
func newInstance(t testing.TB, kvTokens int) *instance {
	t.Helper()
	shape, err := synth.Lookup("smollm2-135m")
	if err != nil {
		t.Fatal(err)
	}
	c := shape.Config
	c.Layers, c.VocabSize, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.RopeDim, c.FFNDim, c.ContextLen = 2, 320, 64, 4, 2, 16, 16, 128, 1024
	shape.Config = c
	fm, err := synth.Model(shape, quant.F32, 7)
	if err != nil {
		t.Fatal(err)
	}
	fm.ChatTemplate = testChatTemplate
	ev := server.NewKVEvents(0)
	metrics := server.NewMetrics("tiny")
	// 2 layers x 2 KV heads x 16 dims x 4 bytes x 2 (K and V) = 512 bytes a token.
	eng, err := kvasir.OpenModel(fm, kvasir.Options{Threads: 1, KVCacheMemory: int64(kvTokens) * 512,
		OnRequestDone: metrics.OnRequestDone, OnKVEvent: ev.Record})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, server.Config{ModelNames: []string{"tiny"}, KVEvents: ev, Metrics: metrics,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{eng: eng}
	in.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if in.dead.Load() {
			hangUp(w)
			return
		}
		srv.ServeHTTP(&countingWriter{ResponseWriter: w, in: in}, r)
	}))
	t.Cleanup(func() {
		in.kill()
		in.ts.Close()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Shutdown(ctx)
	})
	return in
}

// kill makes the instance drop every connection, as a killed process's do.
func (in *instance) kill() {
	in.dead.Store(true)
	in.ts.CloseClientConnections()
}

// hangUp closes the connection of w without an answer.
func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}

// countingWriter counts an instance's stream events and kills it after the trip's count.
type countingWriter struct {
	http.ResponseWriter
	in *instance
}

// Write lets out only the events up to the trip's count: one write may carry several (the
// server coalesces the events a slow reader has not taken yet), and the instance must die
// mid-stream, not after its last token.
func (c *countingWriter) Write(p []byte) (int, error) {
	if c.in.dead.Load() {
		return 0, io.ErrClosedPipe
	}
	trip := c.in.trip.Load()
	if trip == nil || trip.Load() <= 0 {
		return c.ResponseWriter.Write(p)
	}
	k, seen, cut := trip.Load(), c.in.events.Load(), len(p)
	marker := []byte("data: ")
	for i := 0; ; {
		j := bytes.Index(p[i:], marker)
		if j < 0 {
			break
		}
		if seen >= k {
			cut = i + j
			break
		}
		seen++
		i += j + len(marker)
	}
	c.in.events.Store(seen)
	n, err := c.ResponseWriter.Write(p[:cut])
	if seen >= k && trip.CompareAndSwap(k, 0) {
		c.in.dead.Store(true) // nothing more gets out
		go c.in.ts.CloseClientConnections()
		if cut < len(p) {
			return n, io.ErrClosedPipe
		}
	}
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// newTestRouter starts a router over the instances, polling them every 20ms, and waits
// until it sees them all healthy.
func newTestRouter(t testing.TB, cfg Config, ins ...*instance) (*Router, *httptest.Server) {
	t.Helper()
	for _, in := range ins {
		cfg.Backends = append(cfg.Backends, in.ts.URL)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(rt)
	t.Cleanup(func() {
		ts.Close()
		rt.Close()
	})
	waitFor(t, 5*time.Second, "backends healthy", func() bool {
		for _, b := range rt.backends {
			if !b.healthy.Load() {
				return false
			}
		}
		return true
	})
	return rt, ts
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitGoroutines waits until the goroutine count is back to baseline.
func waitGoroutines(t testing.TB, baseline int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, baseline %d:\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// textOnly is a logit_bias that keeps the tiny model from the control and byte tokens, so
// that its output is text that decodes the same however it is cut.
func textOnly() map[string]float64 {
	m := map[string]float64{}
	for id := 0; id < 3+256; id++ {
		m[strconv.Itoa(id)] = -100
	}
	return m
}

// post sends a JSON request and decodes the reply into out, failing on a status other
// than 200.
func post(t testing.TB, url string, body any, out any) {
	t.Helper()
	if err := tryPost(url, body, out); err != nil {
		t.Fatal(err)
	}
}

// tryPost is post returning its error (for goroutines other than the test's).
func tryPost(url string, body any, out any) error {
	b, _ := json.Marshal(body)
	res, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: status %d: %s", url, res.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("POST %s: %v: %s", url, err, raw)
	}
	return nil
}

// streamed is what a client reads of a stream: the text, the finish reason, the usage,
// the chunk ids and whether [DONE] came.
type streamed struct {
	text, finish string
	usage        *usage
	ids          map[string]bool
	done         bool
	errs         []string
}

// readStream sends a streamed request and reads it all.
func readStream(t testing.TB, url string, body map[string]any) streamed {
	t.Helper()
	body["stream"] = true
	b, _ := json.Marshal(body)
	res, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(res.Body)
		t.Fatalf("POST %s: status %d: %s", url, res.StatusCode, raw)
	}
	out := streamed{ids: map[string]bool{}}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			out.done = true
			break
		}
		var c struct {
			ID      string
			Choices []struct {
				Text         string
				Delta        struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
			Usage *usage
			Error *struct{ Message string }
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if c.Error != nil {
			out.errs = append(out.errs, c.Error.Message)
		}
		if c.ID != "" {
			out.ids[c.ID] = true
		}
		for _, ch := range c.Choices {
			out.text += ch.Text + ch.Delta.Content
			if ch.FinishReason != nil {
				out.finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			out.usage = c.Usage
		}
	}
	return out
}
