package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// wordRequests makes n text requests of outputLen tokens.
func wordRequests(n, outputLen int) []SampleRequest {
	reqs := make([]SampleRequest, n)
	for i := range reqs {
		reqs[i] = SampleRequest{Prompt: "hello there", PromptLen: 2, OutputLen: outputLen}
	}
	return reqs
}

func within(t *testing.T, name string, got, want, below, above float64) {
	t.Helper()
	if got < want-below || got > want+above {
		t.Errorf("%s = %.2f ms, want %.2f ms (-%.0f/+%.0f)", name, got, want, below, above)
	}
}

func TestRunTimingMatchesInjectedDelays(t *testing.T) {
	for _, endpoint := range []string{"/v1/completions", "/v1/chat/completions"} {
		t.Run(strings.Trim(endpoint, "/"), func(t *testing.T) {
			// Delays long enough that a loaded machine's scheduling noise (some 10 ms) is
			// small beside them, while a TPOT that counted the TTFT (54 ms) is far off.
			const ttft, itl, tokens = 120 * time.Millisecond, 30 * time.Millisecond, 6
			f := &fakeServer{TTFT: ttft, ITL: itl, Tokens: 100}
			s := newFake(t, f)
			c := &Client{HTTP: NewHTTPClient(), BaseURL: s.URL, Endpoint: endpoint, Model: "fake-model", IgnoreEOS: true, Timeout: 10 * time.Second}
			res, err := Run(context.Background(), Config{Client: c, MaxConcurrency: 2, Percentiles: []float64{50, 99}}, wordRequests(6, tokens))
			if err != nil {
				t.Fatal(err)
			}
			m := res.Metrics
			if m.Completed != 6 || m.Failed != 0 {
				t.Fatalf("completed %d, failed %d; errors: %+v", m.Completed, m.Failed, res.Outputs[0].Error)
			}
			if m.TotalOutput != 6*tokens || m.TotalInput != 6*7 {
				t.Errorf("tokens in/out = %d/%d, want %d/%d (from usage)", m.TotalInput, m.TotalOutput, 6*7, 6*tokens)
			}
			// Lower bounds are the injected delays (less a clock tick); upper bounds leave room
			// for a loaded 2-core machine.
			msf := func(d time.Duration) float64 { return float64(d) / 1e6 }
			within(t, "mean TTFT", m.TTFT.Mean, msf(ttft), 1, 60)
			within(t, "mean TPOT", m.TPOT.Mean, msf(itl), 1, 15)
			within(t, "median ITL", m.ITL.Median, msf(itl), 1, 15)
			within(t, "mean E2EL", m.E2EL.Mean, msf(ttft+(tokens-1)*itl), 1, 120)
			for _, o := range res.Outputs {
				if len(o.ITL) != tokens-1 {
					t.Errorf("%d ITL gaps, want %d (the role chunk must not count)", len(o.ITL), tokens-1)
				}
				// TPOT = (e2e - ttft) / (n - 1) and the gaps sum to e2e - ttft.
				var sum time.Duration
				for _, d := range o.ITL {
					sum += d
				}
				if d := sum - (o.Latency - o.TTFT); d < -time.Microsecond || d > time.Microsecond {
					t.Errorf("ITL gaps sum to %v, latency - TTFT is %v", sum, o.Latency-o.TTFT)
				}
				if o.GeneratedText != "t0 t1 t2 t3 t4 t5 " {
					t.Errorf("generated %q", o.GeneratedText)
				}
			}
			if m.MaxConcurrentRequests < 1 || m.MaxConcurrentRequests > 2 {
				t.Errorf("peak concurrency %d with --max-concurrency 2", m.MaxConcurrentRequests)
			}
			// Two at a time, 3 waves of about 135 ms each.
			if res.Duration < 3*(ttft+(tokens-1)*itl) {
				t.Errorf("duration %v shorter than three waves", res.Duration)
			}
			body := <-f.bodies
			if body["stream"] != true || body["ignore_eos"] != true || body["model"] != "fake-model" {
				t.Errorf("request body %v", body)
			}
			if so, _ := body["stream_options"].(map[string]any); so["include_usage"] != true {
				t.Errorf("stream_options %v", body["stream_options"])
			}
			if body["max_tokens"] != float64(tokens) {
				t.Errorf("max_tokens %v", body["max_tokens"])
			}
		})
	}
}

func TestRunCountsChunksWithoutUsage(t *testing.T) {
	s := newFake(t, &fakeServer{Tokens: 5, NoUsage: true})
	c := &Client{HTTP: NewHTTPClient(), BaseURL: s.URL, Endpoint: "/v1/completions", Model: "m"}
	res, err := Run(context.Background(), Config{Client: c}, wordRequests(3, 4))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Outputs {
		if !o.Success || o.OutputTokens != 4 || o.UsageReported || o.PromptLen != 2 {
			t.Errorf("output %+v: want 4 counted chunks and the dataset's prompt length", o)
		}
	}
}

func TestRunCountsFailures(t *testing.T) {
	f := &fakeServer{Tokens: 3,
		Fail: func(n int64) int {
			switch n % 5 {
			case 1:
				return 500
			case 2:
				return 429
			}
			return 0
		},
		MidStreamError: func(n int64) bool { return n%5 == 3 },
	}
	s := newFake(t, f)
	c := &Client{HTTP: NewHTTPClient(), BaseURL: s.URL, Endpoint: "/v1/completions", Model: "m", Timeout: 5 * time.Second}
	res, err := Run(context.Background(), Config{Client: c, MaxConcurrency: 1, Percentiles: []float64{99}}, wordRequests(10, 3))
	if err != nil {
		t.Fatal(err)
	}
	m := res.Metrics
	if m.Failed != 6 || m.Completed != 4 {
		t.Fatalf("failed %d, completed %d; want 6 and 4", m.Failed, m.Completed)
	}
	var msgs []string
	for _, o := range res.Outputs {
		if !o.Success {
			msgs = append(msgs, o.Error)
		}
	}
	joined := strings.Join(msgs, "\n")
	for _, want := range []string{"500 Internal Server Error: injected failure", "429 Too Many Requests", "injected mid-stream error"} {
		if !strings.Contains(joined, want) {
			t.Errorf("errors lack %q:\n%s", want, joined)
		}
	}
	var out bytes.Buffer
	WriteSummary(&out, Report{PercentileMetrics: []string{"ttft"}, Percentiles: []float64{99}, RequestRate: math.Inf(1)}, res)
	if !strings.Contains(out.String(), "Error 0: ") || !strings.Contains(out.String(), "Failed requests:                         6") {
		t.Errorf("summary:\n%s", out.String())
	}
}

func TestRunUnreachableServer(t *testing.T) {
	c := &Client{HTTP: NewHTTPClient(), BaseURL: "http://127.0.0.1:1", Endpoint: "/v1/completions", Model: "m", Timeout: time.Second}
	res, err := Run(context.Background(), Config{Client: c}, wordRequests(3, 3))
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics.Failed != 3 || res.Metrics.RequestThroughput != 0 {
		t.Errorf("metrics %+v", res.Metrics)
	}
}

func TestRunTimeout(t *testing.T) {
	s := newFake(t, &fakeServer{Tokens: 3, Hang: 5 * time.Second})
	c := &Client{HTTP: NewHTTPClient(), BaseURL: s.URL, Endpoint: "/v1/completions", Model: "m", Timeout: 100 * time.Millisecond}
	start := time.Now()
	res, err := Run(context.Background(), Config{Client: c}, wordRequests(2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("run took %v despite a 100 ms timeout", time.Since(start))
	}
	if res.Metrics.Failed != 2 || !strings.Contains(res.Outputs[0].Error, "deadline") {
		t.Errorf("failed %d, error %q", res.Metrics.Failed, res.Outputs[0].Error)
	}
}

func TestRunCancelled(t *testing.T) {
	s := newFake(t, &fakeServer{Tokens: 2, TTFT: 10 * time.Millisecond})
	c := &Client{HTTP: NewHTTPClient(), BaseURL: s.URL, Endpoint: "/v1/completions", Model: "m"}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	// 100 requests at 10/s would take 10 s; the context ends the run early.
	res, err := Run(ctx, Config{Client: c, RequestRate: 10}, wordRequests(100, 2))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || res.Metrics.Failed < 90 || res.Duration > 2*time.Second {
		t.Errorf("interrupted %v, failed %d, duration %v", res.Interrupted, res.Metrics.Failed, res.Duration)
	}
}

func TestServeEndToEnd(t *testing.T) {
	fs := &fakeServer{Tokens: 8, TTFT: 5 * time.Millisecond, ITL: 2 * time.Millisecond, Tokenize: true}
	s := newFake(t, fs)
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	g, _ := ParseGoodput("ttft:5000 tpot:1000")
	res, err := Serve(context.Background(), ServeOptions{
		BaseURL: s.URL, Endpoint: "/v1/completions",
		Dataset:           DatasetConfig{Name: DatasetRandom, NumPrompts: 12, RandomInputLen: 16, RandomOutputLen: 4, Seed: 1},
		RequestRate:       200,
		MaxConcurrency:    4,
		PercentileMetrics: []string{"ttft", "tpot", "itl", "e2el"},
		Percentiles:       []float64{50, 99.9},
		Goodput:           g,
		SaveResult:        true, ResultDir: dir, ResultFilename: "r.json",
		PlotPath: filepath.Join(dir, "plot.png"),
		Out:      &out, Err: &errOut,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if res.Metrics.Completed != 12 {
		t.Fatalf("completed %d", res.Metrics.Completed)
	}
	text := out.String()
	for _, want := range []string{
		"First model name: fake-model",
		"Traffic request rate: 200",
		"Burstiness factor: 1 (Poisson process)",
		"============ Serving Benchmark Result ============",
		"Successful requests:                     12",
		"Maximum request concurrency:             4",
		"Request rate configured (RPS):           200.00",
		"Request goodput (req/s):",
		"Total Token throughput (tok/s):",
		"---------------Time to First Token----------------",
		"-----Time per Output Token (excl. 1st token)------",
		"---------------Inter-token Latency----------------",
		"----------------End-to-end Latency----------------",
		"P99.9 E2EL (ms):",
		"P50 TTFT (ms):",
		"==================================================",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
	// The fake's own histograms (at /metrics) agree with the client's figures.
	if sv := res.Server; sv == nil || sv.Prefix != "kvasir" || sv.Requests != 12 {
		t.Errorf("server latency %+v", res.Server)
	} else {
		if d := res.Metrics.TTFT.Mean - sv.TTFT; d < 0 || d > 0.1*sv.TTFT+5 {
			t.Errorf("client TTFT %.2f ms vs server %.2f ms", res.Metrics.TTFT.Mean, sv.TTFT)
		}
		if d := res.Metrics.ITL.Mean - sv.ITL; d < -1 || d > 0.1*sv.ITL+2 {
			t.Errorf("client ITL %.2f ms vs server %.2f ms", res.Metrics.ITL.Mean, sv.ITL)
		}
		if !strings.Contains(text, "Server mean TTFT (ms):") {
			t.Errorf("summary lacks the server's figures:\n%s", text)
		}
	}
	if !strings.Contains(errOut.String(), "token ids from the server's /tokenize") {
		t.Errorf("notes: %s", errOut.String())
	}
	data, err := os.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"date", "backend", "model_id", "num_prompts", "request_rate", "burstiness", "max_concurrency",
		"duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
		"output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls", "latencies",
		"generated_texts", "errors", "max_output_tokens_per_s", "max_concurrent_requests",
		"mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p99.9_ttft_ms",
		"mean_tpot_ms", "p99.9_tpot_ms", "server_mean_ttft_ms", "mean_itl_ms", "p99.9_itl_ms", "mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p99.9_e2el_ms"} {
		if _, ok := r[k]; !ok {
			t.Errorf("result JSON lacks %q", k)
		}
	}
	if r["model_id"] != "fake-model" || r["backend"] != "openai" || r["num_prompts"] != 12.0 || r["max_concurrency"] != 4.0 || r["request_goodput"] == nil {
		t.Errorf("setup keys: %v %v %v %v %v", r["model_id"], r["backend"], r["num_prompts"], r["max_concurrency"], r["request_goodput"])
	}
	if lens := r["input_lens"].([]any); len(lens) != 12 || lens[0] != 7.0 {
		t.Errorf("input_lens %v (want the server's usage)", lens)
	}
	// The prompts were token ids of the server's vocabulary, 16 each.
	body := <-fs.bodies
	if ids, ok := body["prompt"].([]any); !ok || len(ids) != 16 {
		t.Errorf("prompt %v: want 16 token ids", body["prompt"])
	}
	f, err := os.Open(filepath.Join(dir, "plot.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("plot: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 800 {
		t.Errorf("plot is %v", b)
	}
}
