package server

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvasir-llm/kvasir"
)

// scrape reads /metrics into its metric families, by name.
func scrape(t *testing.T, env *testEnv) map[string]*dto.MetricFamily {
	t.Helper()
	status, body := env.do(t, http.MethodGet, "/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// parityTraffic is what the scripted traffic sent, as the test counts it: per request its
// prompt length (from usage), n and max_tokens (every choice runs to max_tokens), and the
// cached prompt tokens the responses reported.
type parityTraffic struct {
	requests []struct{ prompt, n, maxTokens int }
	cached   int
}

func (p *parityTraffic) add(u usage, n, maxTokens int) {
	p.requests = append(p.requests, struct{ prompt, n, maxTokens int }{u.PromptTokens, n, maxTokens})
	p.cached += u.PromptTokensDetails.CachedTokens
}

// TestMetricsParity sends scripted traffic (a prompt, the same prompt again so that its
// prefix is cached, a streamed request, an n = 3 request), scrapes /metrics and checks every
// metric of vLLM v1's list against counts the test makes itself: prompt tokens including
// cached ones and per choice, as vLLM counts child requests; histogram counts and sums per
// choice; TPOT once per choice; ITL once per token after the first.
func TestMetricsParity(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	var traffic parityTraffic
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 1)
	complete := func(body map[string]any, n, maxTokens int) {
		t.Helper()
		body["max_tokens"], body["n"], body["ignore_eos"] = maxTokens, n, true
		var res completionResponse
		env.post(t, "/v1/completions", body, &res)
		if len(res.Choices) != n || res.Usage == nil || res.Usage.CompletionTokens != n*maxTokens {
			t.Fatalf("unexpected response: %+v", res)
		}
		for _, c := range res.Choices {
			if c.FinishReason == nil || *c.FinishReason != kvasir.FinishLength {
				t.Fatalf("choice %d did not finish with length", c.Index)
			}
		}
		traffic.add(*res.Usage, n, maxTokens)
	}
	complete(map[string]any{"prompt": long, "temperature": 0}, 1, 5)
	complete(map[string]any{"prompt": long, "temperature": 0}, 1, 4)
	if traffic.cached == 0 {
		t.Fatal("the repeated prompt took nothing from the prefix cache")
	}
	events := env.stream(t, "/v1/completions", map[string]any{"prompt": "hello there", "max_tokens": 6, "ignore_eos": true,
		"stream": true, "stream_options": map[string]any{"include_usage": true}})
	var last completionResponse
	if err := json.Unmarshal([]byte(events[len(events)-2]), &last); err != nil || last.Usage == nil {
		t.Fatalf("no usage chunk: %v %q", err, events[len(events)-2])
	}
	traffic.add(*last.Usage, 1, 6)
	complete(map[string]any{"prompt": "a b c d", "temperature": 1, "seed": 3}, 3, 3)

	var choices, promptTokens, genTokens, maxGen, nSum, nLE2, itl, lookedUp float64
	for _, r := range traffic.requests {
		n := float64(r.n)
		choices += n
		promptTokens += n * float64(r.prompt)
		genTokens += n * float64(r.maxTokens)
		maxGen += float64(r.maxTokens)
		nSum += n
		if r.n <= 2 {
			nLE2++
		}
		itl += n * float64(r.maxTokens-1)
		lookedUp += float64(r.prompt)
	}
	requests := float64(len(traffic.requests))
	fams := scrape(t, env)

	// get returns the one metric of family name, checking its type and labels.
	get := func(name string, typ dto.MetricType, labels ...string) *dto.Metric {
		t.Helper()
		f := fams["kvasir:"+name]
		if f == nil {
			t.Fatalf("no metric kvasir:%s", name)
		}
		if f.GetType() != typ {
			t.Fatalf("kvasir:%s is a %s, not a %s", name, f.GetType(), typ)
		}
		for _, m := range f.Metric {
			got := map[string]string{}
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
			}
			if name != "cache_config_info" && (got["model_name"] != testModelName || got["engine"] != "0") {
				t.Fatalf("kvasir:%s labels %v lack model_name and engine", name, got)
			}
			match := true
			for i := 0; i+1 < len(labels); i += 2 {
				match = match && got[labels[i]] == labels[i+1]
			}
			if match {
				return m
			}
		}
		t.Fatalf("kvasir:%s has no series %v", name, labels)
		return nil
	}
	value := func(name string, typ dto.MetricType, labels ...string) float64 {
		t.Helper()
		m := get(name, typ, labels...)
		switch typ {
		case dto.MetricType_COUNTER:
			return m.Counter.GetValue()
		default:
			return m.Gauge.GetValue()
		}
	}
	check := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %g, want %g", what, got, want)
		}
	}
	// hist checks a histogram's count (unless negative) and sum (when given).
	hist := func(name string, count float64, sum ...float64) *dto.Histogram {
		t.Helper()
		h := get(name, dto.MetricType_HISTOGRAM).Histogram
		if count >= 0 {
			check(name+" count", float64(h.GetSampleCount()), count)
		}
		if len(sum) > 0 {
			check(name+" sum", h.GetSampleSum(), sum[0])
		}
		return h
	}
	bucket := func(h *dto.Histogram, le float64) float64 {
		for _, b := range h.Bucket {
			if b.GetUpperBound() == le {
				return float64(b.GetCumulativeCount())
			}
		}
		t.Fatalf("no bucket le=%g", le)
		return 0
	}

	const counter, gauge = dto.MetricType_COUNTER, dto.MetricType_GAUGE
	check("prompt_tokens_total", value("prompt_tokens_total", counter), promptTokens)
	check("generation_tokens_total", value("generation_tokens_total", counter), genTokens)
	check("request_success_total{length}", value("request_success_total", counter, "finished_reason", "length"), choices)
	check("request_success_total{stop}", value("request_success_total", counter, "finished_reason", "stop"), 0)
	check("request_success_total{abort}", value("request_success_total", counter, "finished_reason", "abort"), 0)
	check("num_preemptions_total", value("num_preemptions_total", counter), 0)
	check("prefix_cache_hits_total", value("prefix_cache_hits_total", counter), float64(traffic.cached))
	// Every request's prompt is looked up once: the n = 3 request's children share their
	// parent's lookup (where vLLM's child requests look up one by one).
	check("prefix_cache_queries_total", value("prefix_cache_queries_total", counter), lookedUp)
	check("num_requests_running", value("num_requests_running", gauge), 0)
	check("num_requests_waiting", value("num_requests_waiting", gauge), 0)
	check("kv_cache_usage_perc", value("kv_cache_usage_perc", gauge), 0)
	check("cache_config_info", value("cache_config_info", gauge, "engine", "0", "block_size", "16", "enable_prefix_caching", "true"), 1)

	hist("request_prompt_tokens", choices, promptTokens)
	hist("request_generation_tokens", choices, genTokens)
	hist("request_params_max_tokens", choices, genTokens)
	hist("request_max_num_generation_tokens", requests, maxGen)
	pn := hist("request_params_n", requests, nSum)
	check("request_params_n le=2", bucket(pn, 2), nLE2)
	it := hist("iteration_tokens_total", -1, promptTokens+genTokens)
	if c := float64(it.GetSampleCount()); c < 6 || c > genTokens {
		t.Errorf("iteration_tokens_total counts %g steps, want between the longest request's 6 and the %g tokens", c, genTokens)
	}
	ttft := hist("time_to_first_token_seconds", choices)
	hist("e2e_request_latency_seconds", choices)
	hist("request_queue_time_seconds", choices)
	tpot := hist("request_time_per_output_token_seconds", choices)
	hist("inter_token_latency_seconds", itl)
	prefill := hist("request_prefill_time_seconds", choices)
	decode := hist("request_decode_time_seconds", choices)
	inference := hist("request_inference_time_seconds", choices)
	if d := inference.GetSampleSum() - prefill.GetSampleSum() - decode.GetSampleSum(); math.Abs(d) > 1e-6 {
		t.Errorf("inference time %g is not prefill %g + decode %g", inference.GetSampleSum(), prefill.GetSampleSum(), decode.GetSampleSum())
	}
	if ttft.GetSampleSum() <= 0 || tpot.GetSampleSum() <= 0 || decode.GetSampleSum() <= 0 {
		t.Errorf("zero latencies: ttft %g, tpot %g, decode %g", ttft.GetSampleSum(), tpot.GetSampleSum(), decode.GetSampleSum())
	}
	// vLLM's buckets: TTFT's first is 1 ms, the request latencies' last 7680 s.
	if b := ttft.Bucket[0].GetUpperBound(); b != 0.001 {
		t.Errorf("first TTFT bucket %g", b)
	}
	// (The parser lists the +Inf bucket last.)
	if bs := inference.Bucket; bs[len(bs)-2].GetUpperBound() != 7680 {
		t.Errorf("last latency bucket %g", bs[len(bs)-2].GetUpperBound())
	}
	if bs := get("request_prompt_tokens", dto.MetricType_HISTOGRAM).Histogram.Bucket; len(bs) != 9 || bs[7].GetUpperBound() != 200 {
		t.Errorf("prompt token buckets are not 1-2-5 up to the context length of 256: %v", bs)
	}
}

// TestTokenBuckets: vLLM's 1-2-5 buckets up to a maximum.
func TestTokenBuckets(t *testing.T) {
	got := tokenBuckets(100)
	want := []float64{1, 2, 5, 10, 20, 50, 100}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%v, want %v", got, want)
		}
	}
}

// TestGrafanaDashboardNames: every kvasir metric the dashboard in deploy/grafana queries is
// one the server exports (a speculating server, so that the spec_decode counters exist).
func TestGrafanaDashboardNames(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/kvasir.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	opt := kvasir.Options{Speculative: &kvasir.SpeculativeConfig{Proposer: repeatLast{}, NumSpeculativeTokens: 2}}
	env := newTestEnv(t, opt, Config{})
	var res completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 3}, &res)
	fams := scrape(t, env)
	names := regexp.MustCompile(`kvasir:[a-z0-9_]+`).FindAllString(string(b), -1)
	if len(names) < 20 {
		t.Fatalf("the dashboard queries only %d kvasir metrics", len(names))
	}
	for _, n := range names {
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suf)
		}
		if fams[base] == nil {
			t.Errorf("the dashboard queries %s, which /metrics lacks", n)
		}
	}
}
