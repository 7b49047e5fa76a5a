package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// serveEnv is a server answering through Serve on a loopback listener, as kvasir serve
// runs it (the connection cap, header and idle deadlines are Serve's).
type serveEnv struct {
	eng  *kvasir.Engine
	srv  *Server
	addr string
}

// newServeEnv starts Serve on a tiny engine. Its accepted connections get small kernel
// send buffers, as a real network holds little in flight: a client that stops reading then
// blocks the server's writes after some 40 KB, not after the megabytes loopback takes.
func newServeEnv(t testing.TB, opt kvasir.Options, cfg Config) *serveEnv {
	t.Helper()
	eng, srv := newTestServer(t, opt, cfg, quant.F32)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, smallSendBuffers{ln}, time.Second) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &serveEnv{eng: eng, srv: srv, addr: ln.Addr().String()}
}

// smallSendBuffers is a listener whose connections have a 16 KiB kernel send buffer.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(16 << 10)
	}
	return c, err
}

// dial opens a raw connection and writes req on it; the client's receive buffer is small,
// so that a client that does not read holds little.
func (e *serveEnv) dial(t testing.TB, req string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c
}

// post is a raw HTTP/1.1 POST of body with the given extra header lines.
func post(path, body, headers string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", path, headers, len(body), body)
}

// stalledPost is a raw POST whose headers announce a 1000-byte body of which only "{"
// comes.
func stalledPost(path, headers string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: 1000\r\n\r\n{", path, headers)
}

// readAnswer reads one response from c within d and checks that the server closes the
// connection after it.
func readAnswer(t testing.TB, c net.Conn, d time.Duration) (*http.Response, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", d, err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the connection stays open after the answer (read %d, %v)", n, err)
	}
	return res, body
}

// healthLatency times GET /health on a fresh connection.
func (e *serveEnv) healthLatency(t testing.TB) time.Duration {
	t.Helper()
	start := time.Now()
	res, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + e.addr + "/health")
	if err != nil {
		t.Fatalf("/health: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/health: status %d", res.StatusCode)
	}
	return time.Since(start)
}

// waitFor polls cond every 10 ms until it holds, failing after d.
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

// heapMiB is the heap in use, in MiB, after a collection when gc is set.
func heapMiB(gc bool) float64 {
	if gc {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse) / (1 << 20)
}

// longStream is a streamed completion of 240 tokens with 20 alternatives each: some 150 KB
// of events, more than the kernel buffers of a client that does not read.
const longStream = `{"prompt":[1,2,3],"max_tokens":240,"ignore_eos":true,"logprobs":20,"stream":true}`

// TestStalledAndNonReadingClients holds 300 connections whose body stalls after its first
// byte and 300 stream clients that never read (100 each under the race detector): /health keeps answering in < 100 ms, the
// stalled bodies get 408 at their body deadline, the streams are cut off at their write
// deadline and the requests still generating aborted; then no connection is left open, no
// KV block is used and the goroutines are back to their baseline.
func TestStalledAndNonReadingClients(t *testing.T) {
	// Under the race detector, which looks for races rather than figures, a third of them.
	stalled, nonReading := 300/raceShare, 300/raceShare
	deadline := time.Second
	// All the streams run at once (no second round of waiting ones).
	env := newServeEnv(t, kvasir.Options{MaxNumSeqs: nonReading}, Config{BodyTimeout: deadline, WriteTimeout: deadline, HeaderTimeout: deadline, MaxConnections: 1000})
	env.healthLatency(t) // starts what starts lazily
	time.Sleep(50 * time.Millisecond)
	baseline, heap := runtime.NumGoroutine(), heapMiB(true)
	peak := heap

	start := time.Now()
	var conns []net.Conn
	for range stalled {
		conns = append(conns, env.dial(t, stalledPost("/v1/completions", "Content-Type: application/json\r\n")))
	}
	for range nonReading {
		conns = append(conns, env.dial(t, post("/v1/completions", longStream, "")))
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	waitFor(t, 5*time.Second*raceSlowdown, "the streams started", func() bool { return env.eng.Stats().Running >= 100 })
	// /health answers every probe; on a loaded 2-core machine a probe now and then waits
	// for the scheduler, so it is most of them that must be fast.
	var slow int
	var worst time.Duration
	for range 10 {
		d := env.healthLatency(t)
		worst, peak = max(worst, d), max(peak, heapMiB(false))
		if d > 100*time.Millisecond*raceSlowdown {
			slow++
		}
		time.Sleep(20 * time.Millisecond)
	}
	if slow > 2 {
		t.Errorf("/health took over 100 ms %d times in 10 (at worst %v) with %d connections held", slow, worst, stalled+nonReading)
	}
	// A stalled body lasts one deadline, a stream until the kernel buffers fill (some 60
	// tokens of 300 sequences: the engine's time, 1-2 s on 2 idle cores, more on a loaded
	// machine) and one write deadline more; without the deadlines none would ever close.
	waitFor(t, 20*deadline*raceSlowdown, "every connection closed by the server", func() bool { return env.srv.openConns.Load() == 0 })
	t.Logf("%d connections reclaimed in %v (deadlines %v), /health at worst %v; heap %.0f MiB before, %.0f at most while held, %.0f after",
		len(conns), time.Since(start).Round(time.Millisecond), deadline, worst, heap, peak, heapMiB(true))
	for _, c := range conns[:stalled] {
		if res, body := readAnswer(t, c, time.Second); res.StatusCode != http.StatusRequestTimeout || apiErrorOf(t, body)["code"] != "request_timeout" {
			t.Fatalf("stalled body: status %d, %s", res.StatusCode, body)
		}
	}
	waitIdle(t, env.eng, 5*time.Second)
	// A stream whose last tokens were queued before its client was cut off has finished
	// (its events wait in the stream buffer); the others were aborted.
	fin := env.eng.Stats().Finished
	if fin[kvasir.FinishAbort] == 0 || fin[kvasir.FinishAbort]+fin[kvasir.FinishLength] != int64(nonReading) {
		t.Errorf("finished %v, want %d in all, some aborted", fin, nonReading)
	}
	t.Logf("stream requests: %d aborted, %d generated to their end before their client was cut off", fin[kvasir.FinishAbort], fin[kvasir.FinishLength])
	for _, c := range conns {
		c.Close()
	}
	waitGoroutines(t, baseline, 5*time.Second)
}

// TestStreamBufferBound: a stream client that stops reading is cut off once
// MaxStreamBuffer bytes wait for it, long before its write deadline, and its request,
// still generating, is aborted.
func TestStreamBufferBound(t *testing.T) {
	env := newServeEnv(t, kvasir.Options{Speculative: &kvasir.SpeculativeConfig{Proposer: slowProposer{2 * time.Millisecond}, NumSpeculativeTokens: 1, DisableDynamic: true}},
		Config{WriteTimeout: time.Minute, MaxStreamBuffer: 8 << 10})
	start := time.Now()
	c := env.dial(t, post("/v1/completions", longStream, ""))
	defer c.Close()
	// The request must be running before its connection's end means anything.
	waitFor(t, 10*time.Second*raceSlowdown, "the stream's request running", func() bool { return env.eng.Stats().Running > 0 })
	waitFor(t, 10*time.Second*raceSlowdown, "the stream cut off", func() bool { return env.srv.openConns.Load() == 0 })
	if d := time.Since(start); d > 5*time.Second*raceSlowdown {
		t.Errorf("cut off after %v", d)
	}
	waitIdle(t, env.eng, 5*time.Second)
	if fin := env.eng.Stats().Finished; fin[kvasir.FinishAbort] != 1 {
		t.Errorf("finished %v, want the request aborted", fin)
	}
	t.Logf("cut off after %v (write deadline 1m)", time.Since(start).Round(time.Millisecond))
}

// slowProposer slows every decode step (it sleeps and proposes nothing), so that a request
// still runs when a test looks for it.
type slowProposer struct{ d time.Duration }

func (p slowProposer) Propose([]int32, int) []int32 {
	time.Sleep(p.d)
	return nil
}

// TestNonReadingResponseClient: a client that sends a request and never reads its
// (non-streamed, large) response is cut off at the write deadline.
func TestNonReadingResponseClient(t *testing.T) {
	deadline := 500 * time.Millisecond
	env := newServeEnv(t, kvasir.Options{}, Config{WriteTimeout: deadline})
	c := env.dial(t, post("/v1/completions", `{"prompt":[1,2,3],"max_tokens":240,"ignore_eos":true,"logprobs":20,"n":4}`, ""))
	defer c.Close()
	waitFor(t, 10*time.Second*raceSlowdown, "the response written", func() bool { return env.eng.Stats().Finished[kvasir.FinishLength] == 4 })
	start := time.Now()
	waitFor(t, 4*deadline*raceSlowdown, "the connection cut off", func() bool { return env.srv.openConns.Load() == 0 })
	t.Logf("cut off %v after the response was ready (write deadline %v)", time.Since(start).Round(time.Millisecond), deadline)
}

// TestEarlyRefusals: a request the headers already condemn is answered at once, with
// Connection: close, although its body never comes (the body deadline is long): no API key
// (401), a body over the limit (413), a body that is not JSON (415), a full queue (429).
func TestEarlyRefusals(t *testing.T) {
	// Requests of about a second (5 ms a token), so that the queue stays full.
	env := newServeEnv(t, kvasir.Options{MaxNumSeqs: 1, MaxWaiting: 1, Speculative: &kvasir.SpeculativeConfig{Proposer: slowProposer{5 * time.Millisecond}, NumSpeculativeTokens: 1, DisableDynamic: true}},
		Config{APIKey: "sekret", BodyTimeout: time.Minute, MaxBodyBytes: 1 << 20})
	key := "Authorization: Bearer sekret\r\n"
	for _, tc := range []struct {
		name, req string
		status    int
		code      string
	}{
		{"no key", stalledPost("/v1/completions", "Content-Type: application/json\r\n"), 401, "invalid_api_key"},
		{"wrong key", stalledPost("/v1/chat/completions", "Authorization: Bearer nope\r\n"), 401, "invalid_api_key"},
		{"too large", "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + key + "Content-Length: 2000000\r\n\r\n{", 413, "request_too_large"},
		{"text/plain", stalledPost("/v1/completions", key+"Content-Type: text/plain\r\n"), 415, "unsupported_media_type"},
		{"form", stalledPost("/tokenize", key+"Content-Type: application/x-www-form-urlencoded\r\n"), 415, "unsupported_media_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			c := env.dial(t, tc.req)
			defer c.Close()
			res, body := readAnswer(t, c, 2*time.Second)
			if d := time.Since(start); d > time.Second*raceSlowdown {
				t.Errorf("answered after %v", d)
			}
			if res.StatusCode != tc.status || !res.Close {
				t.Errorf("status %d, Connection: close %v: %s", res.StatusCode, res.Close, body)
			}
			if e := apiErrorOf(t, body); e["code"] != tc.code {
				t.Errorf("code %v, want %s", e["code"], tc.code)
			}
		})
	}

	// Fill the running slot and the waiting place; a stalled generation is then 429 at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+env.addr+"/v1/completions",
				strings.NewReader(fmt.Sprintf(`{"prompt":"hello","max_tokens":%d,"ignore_eos":true,"stream":true}`, env.eng.MaxModelLen()-8)))
			req.Header.Set("Authorization", "Bearer sekret")
			if res, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
		// The first must run before the second comes, or the second is refused itself.
		waitFor(t, 5*time.Second, fmt.Sprintf("request %d admitted", i), func() bool { s := env.eng.Stats(); return s.Running == 1 && s.Waiting == i })
	}
	c := env.dial(t, stalledPost("/v1/completions", key+"Content-Type: application/json\r\n"))
	defer c.Close()
	res, body := readAnswer(t, c, 2*time.Second)
	if res.StatusCode != http.StatusTooManyRequests || !res.Close || apiErrorOf(t, body)["type"] != "rate_limit_error" {
		t.Errorf("status %d, Connection: close %v: %s", res.StatusCode, res.Close, body)
	}
}

// TestConnectionCap: beyond MaxConnections open connections, a new one is answered 503
// at once and closed; once one closes, connections are served again.
func TestConnectionCap(t *testing.T) {
	env := newServeEnv(t, kvasir.Options{}, Config{MaxConnections: 3, HeaderTimeout: time.Minute})
	var held []net.Conn
	for range 3 {
		held = append(held, env.dial(t, ""))
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	waitFor(t, 2*time.Second, "3 connections accepted", func() bool { return env.srv.openConns.Load() == 3 })
	start := time.Now()
	c := env.dial(t, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	defer c.Close()
	res, body := readAnswer(t, c, 2*time.Second)
	if d := time.Since(start); d > 500*time.Millisecond*raceSlowdown {
		t.Errorf("503 after %v", d)
	}
	if res.StatusCode != http.StatusServiceUnavailable || apiErrorOf(t, body)["code"] != "too_many_connections" {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e.Error.Message, "3 open connections") {
		t.Errorf("message %s does not give the limit (%v)", body, err)
	}
	held[0].Close()
	waitFor(t, 2*time.Second, "the closed connection freed", func() bool { return env.srv.openConns.Load() == 2 })
	env.healthLatency(t)
}

// TestMaxConnectionsFor: the default cap leaves file descriptors under the open-file limit.
func TestMaxConnectionsFor(t *testing.T) {
	for limit, want := range map[int]int{1 << 20: 4096, 20000: 4096, 4096: 3968, 1024: 896, 256: 128, 100: 50, 1: 1} {
		if got := maxConnectionsFor(limit); got != want {
			t.Errorf("open-file limit %d: %d connections, want %d", limit, got, want)
		}
	}
	if n := DefaultMaxConnections(); n < 1 || n > MaxDefaultConnections {
		t.Errorf("DefaultMaxConnections() = %d", n)
	}
}
