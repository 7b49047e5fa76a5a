package router

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// completion is the part of a completion reply the tests read.
type completion struct {
	Choices []struct{ Text string }
	Usage   struct {
		PromptTokens  int `json:"prompt_tokens"`
		PromptDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
}

// words returns a prompt of n made-up words, different for each seed.
func words(seed, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "w%dx%d ", seed, i)
	}
	return b.String()
}

// TestRoutesToPrefixHolder checks that a prompt extending one already served goes to the
// instance that served it, and finds its prefix cached there, for several prefixes sent
// to three instances.
func TestRoutesToPrefixHolder(t *testing.T) {
	ins := []*instance{newInstance(t, 8192), newInstance(t, 8192), newInstance(t, 8192)}
	rt, ts := newTestRouter(t, Config{}, ins...)
	for p := range 6 {
		prefix := words(p, 30)
		var first, second completion
		post(t, ts.URL+"/v1/completions", map[string]any{"prompt": prefix, "max_tokens": 1}, &first)
		post(t, ts.URL+"/v1/completions", map[string]any{"prompt": prefix + "and then some more", "max_tokens": 1}, &second)
		// The prefix's full blocks, all but what the BOS and block boundaries leave out.
		if want := first.Usage.PromptTokens / 16 * 16; second.Usage.PromptDetails.CachedTokens < want {
			t.Errorf("prefix %d: %d of %d prompt tokens cached, want at least %d", p, second.Usage.PromptDetails.CachedTokens, second.Usage.PromptTokens, want)
		}
	}
	if n := testutil.ToFloat64(rt.metrics.decisions.WithLabelValues(ReasonCacheHit)); n < 6 {
		t.Errorf("%v cache-hit decisions, want 6", n)
	}
	// The first prompts spread over the instances (least loaded, in turn).
	used := 0
	for _, in := range ins {
		if in.eng.Stats().PrefixQueries > 0 {
			used++
		}
	}
	if used < 2 {
		t.Errorf("%d instances used for 6 distinct prefixes", used)
	}
}

// TestSessionAffinity checks that requests of one session (user field) without a shared
// prefix stay on one instance.
func TestSessionAffinity(t *testing.T) {
	ins := []*instance{newInstance(t, 4096), newInstance(t, 4096)}
	rt, ts := newTestRouter(t, Config{}, ins...)
	for i := range 4 {
		var c completion
		post(t, ts.URL+"/v1/completions", map[string]any{"prompt": fmt.Sprint(i), "max_tokens": 1, "user": "alice"}, &c)
	}
	served := 0
	for _, in := range ins {
		if in.eng.Stats().PrefixQueries > 0 {
			served++
		}
	}
	if served != 1 || testutil.ToFloat64(rt.metrics.decisions.WithLabelValues(ReasonSession)) != 3 {
		t.Fatalf("one session served by %d instances, %v session decisions", served, testutil.ToFloat64(rt.metrics.decisions.WithLabelValues(ReasonSession)))
	}
}

// TestRetryBeforeFirstByte kills an instance the router still believes healthy: every
// request still succeeds, retried on the other.
func TestRetryBeforeFirstByte(t *testing.T) {
	ins := []*instance{newInstance(t, 4096), newInstance(t, 4096)}
	rt, ts := newTestRouter(t, Config{Policy: PolicyRoundRobin, PollInterval: time.Hour}, ins...)
	ins[0].kill()
	for i := range 4 {
		var c completion
		post(t, ts.URL+"/v1/completions", map[string]any{"prompt": words(i, 5), "max_tokens": 2}, &c)
		s := readStream(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": words(i, 5)}}, "max_tokens": 2})
		if !s.done || len(s.errs) > 0 {
			t.Fatalf("stream through a dead instance: %+v", s)
		}
	}
	if n := testutil.ToFloat64(rt.metrics.retries.WithLabelValues(ins[0].ts.URL)); n < 1 {
		t.Fatalf("%v retries", n)
	}
	if rt.backends[0].healthy.Load() {
		t.Fatal("the dead instance is still marked healthy")
	}
}

// TestNoBackend checks the answer when every instance is down.
func TestNoBackend(t *testing.T) {
	in := newInstance(t, 4096)
	_, ts := newTestRouter(t, Config{PollInterval: time.Hour}, in)
	in.kill()
	res, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", res.StatusCode)
	}
	if res, _ := http.Get(ts.URL + "/health"); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/health: %d with no healthy backend", res.StatusCode)
	}
}

// TestStreamSurvivesBackendDeath kills the instance serving a greedy stream after a few
// events: the client's stream completes through the other instance with the text of an
// uninterrupted run, nothing repeated or missing, under one id, with the right usage; for
// completions and chat. No goroutine is left behind.
func TestStreamSurvivesBackendDeath(t *testing.T) {
	ins := []*instance{newInstance(t, 4096), newInstance(t, 4096)}
	for _, chat := range []bool{false, true} {
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		body := func() map[string]any {
			b := map[string]any{"max_tokens": 40, "temperature": 0, "logit_bias": textOnly(), "repetition_penalty": 4,
				"stream_options": map[string]any{"include_usage": true}}
			if chat {
				b["messages"] = []map[string]string{{"role": "user", "content": "tell me a story"}}
			} else {
				b["prompt"] = "once upon a time"
			}
			return b
		}
		for _, in := range ins {
			in.dead.Store(false)
			in.events.Store(0)
		}
		want := readStream(t, ins[1].ts.URL+path, body())
		t.Logf("%s: %q", path, want.text)
		if !want.done || want.finish != "length" || want.usage == nil || want.usage.CompletionTokens != 40 {
			t.Fatalf("%s uninterrupted: %+v", path, want)
		}
		baseline := runtime.NumGoroutine()
		rt, ts := newTestRouter(t, Config{PollInterval: 20 * time.Millisecond}, ins...)
		var trip atomic.Int64
		trip.Store(12) // whichever serves it first dies after 12 events
		for _, in := range ins {
			in.events.Store(0)
			in.trip.Store(&trip)
		}
		got := readStream(t, ts.URL+path, body())
		if trip.Load() != 0 {
			t.Fatalf("%s: no instance was killed", path)
		}
		if !got.done || len(got.errs) > 0 || got.text != want.text || got.finish != want.finish || len(got.ids) != 1 {
			t.Fatalf("%s through a dying instance:\n got %+v\nwant %+v", path, got, want)
		}
		if got.usage == nil || *got.usage != *want.usage {
			t.Fatalf("%s usage %+v, want %+v", path, got.usage, want.usage)
		}
		failovers := 0.0
		for _, b := range rt.backends {
			failovers += testutil.ToFloat64(rt.metrics.failovers.WithLabelValues(b.name))
		}
		if failovers != 1 {
			t.Fatalf("%s: %v failovers, want 1", path, failovers)
		}
		ts.Close()
		rt.Close()
		http.DefaultClient.CloseIdleConnections()
		waitGoroutines(t, baseline, 5*time.Second)
	}
}

// TestClientDisconnectAborts checks that a client leaving a stream through the router
// ends the request on the instance: it stops running, its KV blocks go back, and the
// router's in-flight count returns to zero.
func TestClientDisconnectAborts(t *testing.T) {
	in := newInstance(t, 4096)
	rt, ts := newTestRouter(t, Config{}, in)
	body := `{"prompt": "a long story", "max_tokens": 500, "ignore_eos": true, "stream": true}`
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(body))
	ctx, cancel := context.WithCancel(context.Background())
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := res.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the request running on the instance", func() bool { return in.eng.Stats().Running == 1 })
	cancel()
	res.Body.Close()
	waitFor(t, 5*time.Second, "the instance to abort the request", func() bool {
		s := in.eng.Stats()
		return s.Running == 0 && s.Waiting == 0 && s.KVUsage == 0
	})
	waitFor(t, 5*time.Second, "the router's in-flight count", func() bool { return rt.backends[0].inflight.Load() == 0 })
	if s := in.eng.Stats(); s.Finished["abort"] != 1 || s.GenerationTokens >= 500 {
		t.Fatalf("the request was not aborted: finished %v, %d tokens generated", s.Finished, s.GenerationTokens)
	}
}
