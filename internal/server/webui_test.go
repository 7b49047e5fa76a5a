package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestWebUIPage checks the page at / loads without the API key, with its security
// headers and a script hash that admits its script, while the API behind it asks for the
// key; the page's own-origin calls pass the Origin check and a foreign origin's do not.
func TestWebUIPage(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{APIKey: "secret"})
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		req, _ := http.NewRequest(m, env.ts.URL+"/", nil)
		res, err := env.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("%s /: %d %s", m, res.StatusCode, res.Header.Get("Content-Type"))
		}
		if m == http.MethodGet && !bytes.Equal(body, webUIPage) {
			t.Errorf("GET / is not the page (%d bytes)", len(body))
		}
		csp := res.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "'sha256-") || strings.Contains(csp, "script-src 'unsafe-inline'") {
			t.Errorf("CSP %q", csp)
		}
	}
	if bytes.Contains(webUIPage, []byte("http://")) || bytes.Contains(webUIPage, []byte("https://")) {
		t.Error("the page names an outside URL: it must load nothing from the network")
	}
	if status, _ := env.do(t, http.MethodGet, "/index.html", nil); status != http.StatusNotFound {
		t.Errorf("GET /index.html: %d, want 404", status)
	}

	post := func(origin, key string) int {
		req, _ := http.NewRequest(http.MethodPost, env.ts.URL+"/v1/chat/completions",
			strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`))
		req.Header.Set("Origin", origin)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := env.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if s := post(env.ts.URL, ""); s != http.StatusUnauthorized {
		t.Errorf("own origin without the key: %d, want 401", s)
	}
	if s := post(env.ts.URL, "secret"); s != http.StatusOK {
		t.Errorf("own origin with the key: %d, want 200", s)
	}
	if s := post("http://evil.example", "secret"); s != http.StatusForbidden {
		t.Errorf("foreign origin: %d, want 403", s)
	}
	if s := post(strings.Replace(env.ts.URL, "http://", "https://", 1), "secret"); s != http.StatusForbidden {
		t.Errorf("own host under another scheme: %d, want 403", s)
	}
}

// chromiumPath finds a Chromium or Chrome binary; it skips the test when there is none,
// unless KVASIR_REQUIRE_TESTDATA=1 (CI, whose .ci/run installs Debian's chromium).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if testdata.Required() {
		t.Fatal("chromium is required (KVASIR_REQUIRE_TESTDATA=1): install Debian's chromium package")
	}
	t.Skip("no chromium installed (apt-get install chromium); skipping the browser test")
	return ""
}

// slowWriter trickles a response out in small flushed pieces, so that an answer streams
// for long enough to be stopped.
type slowWriter struct {
	http.ResponseWriter
}

func (w slowWriter) Write(b []byte) (int, error) {
	rc := http.NewResponseController(w.ResponseWriter)
	written := 0
	for len(b) > 0 {
		n, err := w.ResponseWriter.Write(b[:min(len(b), 64)])
		written += n
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			return written, err
		}
		b = b[n:]
		time.Sleep(20 * time.Millisecond)
	}
	return written, nil
}

// Unwrap lets http.ResponseController reach the connection's Flush and deadlines.
func (w slowWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// webUITemplate joins the messages' contents, one a line: stories260K knows no chat
// markers, and its context is 128 tokens.
const webUITemplate = `{%- for message in messages -%}{{- message['content'] + '\n' -}}{%- endfor -%}`

// TestWebUIChromium drives the chat page in a real headless Chromium through the DevTools
// protocol, against a server with an API key on stories260K: the page loads without the
// key, lists the model once the key is typed, sends a message, and its streamed reply
// equals the greedy reply of a direct API call; a second turn carries the conversation;
// Stop ends a third answer early; a reload keeps the conversation; New chat drops a
// streaming answer and empties the conversation. With KVASIR_WEBUI_SCREENSHOT=path it
// saves a screenshot there (docs/webui.png).
func TestWebUIChromium(t *testing.T) {
	chrome := chromiumPath(t)
	model := testdata.Path(t, "models/stories260K/stories260K.gguf")
	eng, err := kvasir.Open(model, kvasir.Options{Threads: 2, KVCacheMemory: 16 << 20, MaxNumSeqs: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eng.Shutdown(ctx)
	})
	const key, name = "webui-test-key", "stories260K"
	srv, err := New(eng, Config{APIKey: key, ChatTemplate: webUITemplate, ModelNames: []string{name},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	var slow atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() && r.URL.Path == "/v1/chat/completions" {
			w = slowWriter{w}
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	env := &testEnv{eng: eng, srv: srv, ts: ts, apiKey: key}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1000, 640), chromedp.UserDataDir(t.TempDir()))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	defer cancelBrowser()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	poll := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			t.Fatalf("waiting for %s: %v (status %q)", what, err, eval(`document.getElementById('status').textContent`))
		}
	}

	do("open the page", chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.ID("message")))
	// The page's console goes to the test log (subscribed once the browser runs: the first
	// action allocates it).
	go func() {
		for msg, err := range chromedp.Console(bctx) {
			if err != nil {
				return
			}
			t.Logf("console: %v", msg)
		}
	}()
	poll("the page to ask for the key", `document.getElementById('status').textContent.includes('API key')`)
	do("type the key", chromedp.SendKeys(chromedp.ID("api-key"), key), chromedp.Focus(chromedp.ID("message")))
	poll("the model list", `document.querySelectorAll('#model option').length === 1`)
	if got := eval(`document.getElementById('model').value`); got != name {
		t.Fatalf("model picker shows %q, want %q", got, name)
	}
	do("set greedy sampling", chromedp.SendKeys(chromedp.ID("temperature"), "0"), chromedp.SendKeys(chromedp.ID("max-tokens"), "24"))

	// ask sends text from the page and returns the reply and stats it shows once done.
	answers := 0
	ask := func(text string) (reply, stats string) {
		t.Helper()
		do("send "+text, chromedp.SendKeys(chromedp.ID("message"), text), chromedp.Click(chromedp.ID("send")))
		answers++
		last := fmt.Sprintf(`document.querySelectorAll('.msg.assistant')[%d]`, answers-1)
		poll("answer "+text, fmt.Sprintf(`(() => { const a = %s; return a !== undefined && a.dataset.state !== 'streaming'; })()`, last))
		if state := eval(last + `.dataset.state`); state != "done" {
			t.Fatalf("answer %q: state %s: %s", text, state, eval(last+`.querySelector('.content').textContent`))
		}
		return eval(last + `.querySelector('.content').textContent`), eval(last + `.querySelector('.stats').textContent`)
	}
	// direct asks the API itself, greedy, for the same conversation.
	direct := func(msgs []map[string]any) (string, int) {
		t.Helper()
		var res chatResponse
		env.post(t, "/v1/chat/completions", map[string]any{"model": name, "messages": msgs, "temperature": 0, "max_tokens": 24}, &res)
		return res.Choices[0].Message.text(), res.Usage.CompletionTokens
	}
	statsRe := regexp.MustCompile(`^(\d+) tokens? · [0-9.]+ tok/s · TTFT \d+ ms$`)

	q1 := "Once upon a time"
	reply1, stats1 := ask(q1)
	want1, tokens1 := direct([]map[string]any{{"role": "user", "content": q1}})
	if reply1 != want1 || want1 == "" {
		t.Errorf("page reply %q, API reply %q", reply1, want1)
	}
	if m := statsRe.FindStringSubmatch(stats1); m == nil || m[1] != fmt.Sprint(tokens1) {
		t.Errorf("stats %q, want %d tokens, tok/s and TTFT", stats1, tokens1)
	}

	q2 := "The little dog"
	reply2, _ := ask(q2)
	want2, _ := direct([]map[string]any{{"role": "user", "content": q1}, {"role": "assistant", "content": want1}, {"role": "user", "content": q2}})
	if reply2 != want2 {
		t.Errorf("second turn: page reply %q, API reply %q (the page must send the conversation)", reply2, want2)
	}
	shot, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	if err != nil || !bytes.HasPrefix(shot, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot: %v (%d bytes)", err, len(shot))
	}
	if path := os.Getenv("KVASIR_WEBUI_SCREENSHOT"); path != "" {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot (%d bytes) saved to %s", len(shot), filepath.Clean(path))
	}

	// Stop: no max tokens, so the answer runs to the end of the context unless stopped.
	do("clear max tokens", chromedp.Clear(chromedp.ID("max-tokens")))
	slow.Store(true)
	do("send a third message", chromedp.SendKeys(chromedp.ID("message"), "Tell me more"), chromedp.Click(chromedp.ID("send")))
	poll("the answer to start", `(() => { const a = document.querySelectorAll('.msg.assistant'); return a.length === 3 && a[2].querySelector('.content').textContent.length > 0; })()`)
	do("stop", chromedp.Click(chromedp.ID("stop")))
	poll("the answer to stop", `document.querySelectorAll('.msg.assistant')[2].dataset.state === 'stopped'`)
	if stats := eval(`document.querySelectorAll('.msg.assistant')[2].querySelector('.stats').textContent`); !strings.HasSuffix(stats, "· stopped") {
		t.Errorf("stopped answer's stats %q", stats)
	}
	if disabled := eval(`String(document.getElementById('send').disabled) + ' ' + document.getElementById('stop').disabled`); disabled != "false true" {
		t.Errorf("after Stop, send/stop disabled: %s", disabled)
	}
	waitIdle(t, eng, 10*time.Second)

	// A reload shows the conversation kept in localStorage.
	do("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("message")))
	var kept []string
	if err := json.Unmarshal([]byte(eval(`JSON.stringify([...document.querySelectorAll('.msg .content')].map((e) => e.textContent))`)), &kept); err != nil {
		t.Fatal(err)
	}
	if len(kept) != 6 || kept[0] != q1 || kept[1] != want1 || kept[2] != q2 || kept[3] != want2 {
		t.Errorf("after a reload the page shows %q", kept)
	}

	// New chat while an answer streams: the answer is dropped, the conversation emptied.
	do("send a fourth message", chromedp.SendKeys(chromedp.ID("message"), "Again"), chromedp.Click(chromedp.ID("send")))
	poll("the answer to start", `(() => { const a = document.querySelectorAll('.msg.assistant'); return a.length === 4 && a[3].querySelector('.content').textContent.length > 0; })()`)
	if state := eval(`document.querySelectorAll('.msg.assistant')[3].dataset.state`); state != "streaming" {
		t.Fatalf("the fourth answer is %s before New chat: %s", state, eval(`document.querySelectorAll('.msg.assistant')[3].textContent`))
	}
	do("new chat", chromedp.Click(chromedp.ID("new-chat")))
	poll("the page to be idle", `!document.getElementById('send').disabled`)
	if got := eval(`document.querySelectorAll('.msg').length + ' ' + localStorage.getItem('kvasir.history')`); got != "0 []" {
		t.Errorf("after New chat: %s (messages shown, history kept)", got)
	}
	waitIdle(t, eng, 10*time.Second)
}
