package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// syncBuffer is a bytes.Buffer safe for concurrent writers and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAccessLog: with AccessLog every request gets a line with its method, path, status
// and size, a streamed one too (the writer still flushes); without it, none.
func TestAccessLog(t *testing.T) {
	var logs syncBuffer
	env := newTestEnv(t, kvasir.Options{}, Config{AccessLog: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	env.do(t, http.MethodGet, "/v1/models", nil)
	env.do(t, http.MethodGet, "/nope", nil)
	events := env.stream(t, "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 3, "stream": true})
	if len(events) < 2 {
		t.Fatalf("%d events", len(events))
	}
	got := logs.String()
	for _, want := range []string{"method=GET path=/v1/models status=200 bytes=", "path=/nope status=404", "method=POST path=/v1/completions status=200"} {
		if !strings.Contains(got, want) {
			t.Errorf("access log lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "msg=access"); n != 3 {
		t.Errorf("%d access lines, want 3:\n%s", n, got)
	}
	var quiet syncBuffer
	off := newTestEnv(t, kvasir.Options{}, Config{Logger: slog.New(slog.NewTextHandler(&quiet, nil))})
	off.do(t, http.MethodGet, "/v1/models", nil)
	if strings.Contains(quiet.String(), "msg=access") {
		t.Errorf("access lines without AccessLog: %s", quiet.String())
	}
}

// TestStatsLine: the stats line's figures over an interval, figured here by hand.
func TestStatsLine(t *testing.T) {
	prev := kvasir.Stats{PromptTokens: 100, GenerationTokens: 50, PrefixQueries: 200, PrefixHits: 20}
	cur := kvasir.Stats{PromptTokens: 300, GenerationTokens: 150, PrefixQueries: 400, PrefixHits: 120, Running: 3, Waiting: 1, KVUsage: 0.25}
	line, idle := statsLine(prev, cur, 10*time.Second, false)
	want := "Avg prompt throughput: 20.0 tokens/s, Avg generation throughput: 10.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, KV cache usage: 25.0%, Prefix cache hit rate: 50.0%"
	if line != want || idle {
		t.Errorf("got %q (idle %v)\nwant %q", line, idle, want)
	}
	// No lookups in the interval: the rate since start (120 of 400).
	line, idle = statsLine(cur, cur, 10*time.Second, false)
	if !strings.HasSuffix(line, "Prefix cache hit rate: 30.0%") || idle {
		t.Errorf("%q idle %v", line, idle)
	}
	quiet := kvasir.Stats{PromptTokens: 5}
	if _, idle := statsLine(quiet, quiet, time.Second, false); !idle {
		t.Error("an interval without tokens or requests is not idle")
	}
	spec := cur
	spec.SpecDrafts, spec.DraftTokens, spec.AcceptedDrafts = 10, 40, 30
	if line, _ := statsLine(cur, spec, time.Second, true); !strings.HasSuffix(line, "acceptance rate 75.0%, mean acceptance length 4.00") {
		t.Errorf("%q", line)
	}
}

// TestServeLogsStats: Serve with a StatsInterval logs the stats line while a request runs.
func TestServeLogsStats(t *testing.T) {
	var logs syncBuffer
	m := NewMetrics(testModelName)
	eng := newTinyEngine(t, kvasir.Options{})
	srv, err := New(eng, Config{ModelNames: []string{testModelName}, Metrics: m, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		StatsInterval: 5 * time.Millisecond})
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
	res, err := http.Post("http://"+ln.Addr().String()+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"hello","max_tokens":200,"ignore_eos":true}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	time.Sleep(20 * time.Millisecond)
	stop()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "Avg generation throughput") {
		t.Errorf("no stats line:\n%s", logs.String())
	}
}
