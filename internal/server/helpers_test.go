package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// testChatTemplate is ChatML, as the built-in default model has.
const testChatTemplate = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}`

// testModelName is the name the test server serves its model under.
const testModelName = "tiny"

// testContextLen is the tiny model's context length.
const testContextLen = 256

// newTinyEngine opens an engine on a 2-layer synthesized model with a 320-token vocabulary.
func newTinyEngine(t testing.TB, opt kvasir.Options) *kvasir.Engine {
	t.Helper()
	return newTinyEngineOf(t, opt, quant.F32)
}

// newTinyEngineOf is newTinyEngine with weights of type wt. With Q8_0 a token's logprobs are
// the same bits whatever the batch or the prefill shape.
func newTinyEngineOf(t testing.TB, opt kvasir.Options, wt quant.Type) *kvasir.Engine {
	t.Helper()
	return openTinyEngine(t, opt, wt, testContextLen, testChatTemplate)
}

// openTinyEngine opens an engine on the tiny model with weights of type wt, a context of
// contextLen tokens and the chat template given.
func openTinyEngine(t testing.TB, opt kvasir.Options, wt quant.Type, contextLen int, template string) *kvasir.Engine {
	t.Helper()
	shape, err := synth.Lookup("smollm2-135m")
	if err != nil {
		t.Fatal(err)
	}
	c := shape.Config
	c.Layers, c.VocabSize, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.RopeDim, c.FFNDim, c.ContextLen = 2, 320, 64, 4, 2, 16, 16, 128, contextLen
	shape.Config = c
	fm, err := synth.Model(shape, wt, 7)
	if err != nil {
		t.Fatal(err)
	}
	fm.ChatTemplate = template
	if opt.Threads == 0 {
		opt.Threads = 2
	}
	eng, err := kvasir.OpenModel(fm, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Shutdown(ctx)
	})
	return eng
}

// testEnv is a running test server.
type testEnv struct {
	eng    *kvasir.Engine
	srv    *Server
	ts     *httptest.Server
	apiKey string
}

// newTestEnv starts an httptest server on a tiny engine.
func newTestEnv(t testing.TB, opt kvasir.Options, cfg Config) *testEnv {
	t.Helper()
	return newTestEnvOf(t, opt, cfg, quant.F32)
}

// newTestEnvOf is newTestEnv on a tiny engine with weights of type wt.
func newTestEnvOf(t testing.TB, opt kvasir.Options, cfg Config, wt quant.Type) *testEnv {
	t.Helper()
	eng, srv := newTestServer(t, opt, cfg, wt)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &testEnv{eng: eng, srv: srv, ts: ts, apiKey: cfg.APIKey}
}

// newTestServer makes a server on a tiny engine with weights of type wt, its metrics fed
// by the engine, serving testModelName, logging nowhere and rendering chat templates in one
// sandbox worker (unless cfg says otherwise).
func newTestServer(t testing.TB, opt kvasir.Options, cfg Config, wt quant.Type) (*kvasir.Engine, *Server) {
	t.Helper()
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(testModelName)
	}
	cfg.Metrics.Hook(&opt)
	eng := newTinyEngineOf(t, opt, wt)
	if cfg.ModelNames == nil {
		cfg.ModelNames = []string{testModelName}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.ChatTemplateWorkers == 0 {
		// One sandbox process per test server: the default's four, started for each of the
		// package's hundreds of servers, were most of its processes.
		cfg.ChatTemplateWorkers = 1
	}
	srv, err := New(eng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return eng, srv
}

// do sends a request and returns the status and body.
func (e *testEnv) do(t testing.TB, method, path string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if e.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+e.apiKey)
	}
	res, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return res.StatusCode, b
}

// post sends v as JSON and decodes a 200 answer into out.
func (e *testEnv) post(t testing.TB, path string, v any, out any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	status, body := e.do(t, http.MethodPost, path, b)
	if status != http.StatusOK {
		t.Fatalf("POST %s: status %d: %s", path, status, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("POST %s: %v: %s", path, err, body)
	}
}

// stream posts a streaming request and returns the data payloads of its events.
func (e *testEnv) stream(t testing.TB, path string, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.ts.Client().Post(e.ts.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("POST %s: status %d: %s", path, res.StatusCode, body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("content type %q", ct)
	}
	events, err := readEvents(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// readEvents parses a server-sent event stream into its data payloads, checking that every
// event is exactly "data: ...\n\n".
func readEvents(r io.Reader) ([]string, error) {
	var events []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	expectBlank := false
	for sc.Scan() {
		line := sc.Text()
		if expectBlank {
			if line != "" {
				return events, &formatError{"event not followed by a blank line: " + line}
			}
			expectBlank = false
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return events, &formatError{"line without data prefix: " + line}
		}
		events = append(events, payload)
		expectBlank = true
	}
	return events, sc.Err()
}

type formatError struct{ msg string }

func (e *formatError) Error() string { return e.msg }

// apiErrorOf decodes an error body, checking it has OpenAI's four keys.
func apiErrorOf(t testing.TB, body []byte) map[string]any {
	t.Helper()
	var env map[string]map[string]any
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	e, ok := env["error"]
	if !ok {
		t.Fatalf("error body without error: %s", body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e[k]; !ok {
			t.Errorf("error body without %q: %s", k, body)
		}
	}
	if m, _ := e["message"].(string); m == "" {
		t.Errorf("error without a message: %s", body)
	}
	return e
}

// waitIdle polls the engine until nothing runs or waits and no KV block is used.
func waitIdle(t testing.TB, eng *kvasir.Engine, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := eng.Stats()
		if s.Running == 0 && s.Waiting == 0 && s.KVUsage == 0 && s.UsedBlocks == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle after %v: %d running, %d waiting, KV usage %v (%d blocks)", within, s.Running, s.Waiting, s.KVUsage, s.UsedBlocks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
