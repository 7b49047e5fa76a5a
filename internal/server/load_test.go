package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// TestLoad holds 500 concurrent streaming clients on loopback, a tenth of which disconnect
// mid-stream: every other request completes, and afterwards nothing runs, no KV block is
// used and the goroutine count is back to its baseline.
func TestLoad(t *testing.T) {
	const clients, maxTokens = 500, 8
	env := newTestEnv(t, kvasir.Options{}, Config{})
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: 0}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()

	// Warm up (one request) so that lazily started goroutines count in the baseline.
	warm, err := client.Post(env.ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	warm.Body.Close()
	tr.CloseIdleConnections()
	time.Sleep(50 * time.Millisecond)
	baseline := runtime.NumGoroutine()

	start := time.Now()
	var completed, disconnected atomic.Int64
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			quit := i%10 == 0
			errs <- loadClient(client, env.ts.URL, i, maxTokens, quit)
			if quit {
				disconnected.Add(1)
			} else {
				completed.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	elapsed := time.Since(start)
	t.Logf("%d clients (%d completed, %d disconnected) in %v", clients, completed.Load(), disconnected.Load(), elapsed.Round(time.Millisecond))

	waitIdle(t, env.eng, 10*time.Second)
	_, body := env.do(t, http.MethodGet, "/metrics", nil)
	if !strings.Contains(string(body), `kvasir:kv_cache_usage_perc{engine="0",model_name="tiny"} 0`+"\n") {
		t.Errorf("kv_cache_usage_perc is not 0 after the load")
	}
	st := env.eng.Stats()
	if n := st.Finished[kvasir.FinishLength]; n != int64(clients-clients/10)+1 {
		t.Errorf("%d choices finished by length, want %d", n, clients-clients/10+1)
	}
	if n := st.Finished[kvasir.FinishAbort]; n != int64(clients/10) {
		t.Errorf("%d choices aborted, want %d (one per disconnecting client)", n, clients/10)
	}
	tr.CloseIdleConnections()
	env.ts.Client().Transport.(*http.Transport).CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= baseline {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, baseline %d:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loadClient streams one chat or completion request; with quit it hangs up after the
// first content chunk, otherwise it checks the stream ends with a finish_reason and [DONE].
func loadClient(client *http.Client, url string, i, maxTokens int, quit bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if quit {
		maxTokens = 200 // long enough to be surely mid-stream when the client hangs up
	}
	path, body := "/v1/completions", fmt.Sprintf(`{"prompt":"client %d says","max_tokens":%d,"ignore_eos":true,"stream":true}`, i, maxTokens)
	if i%2 == 1 {
		path, body = "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"client %d"}],"max_tokens":%d,"ignore_eos":true,"stream":true}`, i, maxTokens)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, bytes.NewReader([]byte(body)))
	if err != nil {
		return err
	}
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("client %d: %w", i, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("client %d: status %d", i, res.StatusCode)
	}
	sc := bufio.NewScanner(res.Body)
	events, finished, done := 0, false, false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		events++
		if quit && events == 2 {
			cancel()
			return nil
		}
		switch {
		case line == "data: [DONE]":
			done = true
		case strings.Contains(line, `"finish_reason":"length"`):
			finished = true
		}
	}
	if quit {
		return fmt.Errorf("client %d: the stream ended before the client could hang up", i)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("client %d: %w", i, err)
	}
	if !finished || !done {
		return fmt.Errorf("client %d: stream of %d events without finish_reason (%v) or [DONE] (%v)", i, events, finished, done)
	}
	return nil
}
