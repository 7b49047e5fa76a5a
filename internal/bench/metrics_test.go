package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestQuantileMatchesNumpy(t *testing.T) {
	// Values computed with numpy.percentile (linear interpolation).
	ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	five := []float64{15, 20, 35, 40, 50}
	for _, c := range []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{ten, 0, 1}, {ten, 25, 3.25}, {ten, 50, 5.5}, {ten, 90, 9.1}, {ten, 99, 9.91}, {ten, 99.9, 9.991}, {ten, 100, 10},
		{five, 40, 29}, {five, 50, 35}, {five, 75, 40}, {five, 99, 49.6},
		{[]float64{7}, 99, 7}, {nil, 99, 0},
	} {
		if got := Quantile(c.xs, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Quantile(%v, %g) = %g, want %g", c.xs, c.p, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	// Unsorted input; population standard deviation of this classic set is exactly 2.
	st := Summarize([]float64{9, 2, 4, 4, 5, 4, 7, 5}, []float64{50, 99})
	if st.Mean != 5 || st.Std != 2 || st.Median != 4.5 {
		t.Errorf("mean %g std %g median %g, want 5, 2, 4.5", st.Mean, st.Std, st.Median)
	}
	if len(st.Percentiles) != 2 || st.Percentiles[1].P != 99 || math.Abs(st.Percentiles[1].Value-8.86) > 1e-9 {
		t.Errorf("percentiles %+v, want P99 = 8.86", st.Percentiles)
	}
	if z := Summarize(nil, []float64{99}); z.Mean != 0 || z.Percentiles[0].Value != 0 {
		t.Errorf("empty: %+v", z)
	}
}

func out(ttft, latency time.Duration, tokens int, start time.Duration, itl ...time.Duration) RequestOutput {
	return RequestOutput{Success: true, TTFT: ttft, Latency: latency, OutputTokens: tokens, PromptLen: 10, Start: start, ITL: itl}
}

func TestCalculateMetrics(t *testing.T) {
	ms := time.Millisecond
	outputs := []RequestOutput{
		out(100*ms, 500*ms, 5, 0, 100*ms, 100*ms, 100*ms, 100*ms), // TPOT 100
		out(300*ms, 700*ms, 3, 0, 200*ms, 200*ms),                 // TPOT 200
		out(50*ms, 50*ms, 1, 200*ms),                              // no TPOT; 0 for goodput
		{Success: false, Error: "boom", PromptLen: 10},
	}
	m := CalculateMetrics(outputs, 2*time.Second, []float64{99}, Goodput{"ttft": 200, "tpot": 150})
	if m.Completed != 3 || m.Failed != 1 || m.TotalInput != 30 || m.TotalOutput != 9 {
		t.Fatalf("counts %+v", m)
	}
	if m.RequestThroughput != 1.5 || m.OutputThroughput != 4.5 || m.TotalTokenThroughput != 19.5 {
		t.Errorf("throughput %g %g %g", m.RequestThroughput, m.OutputThroughput, m.TotalTokenThroughput)
	}
	// Good: the first (ttft 100 <= 200, tpot 100 <= 150) and the third (tpot 0); the second
	// misses both.
	if m.RequestGoodput != 1 {
		t.Errorf("goodput %g req/s, want 1", m.RequestGoodput)
	}
	if m.TPOT.Mean != 150 || m.TTFT.Mean != 150 || m.E2EL.Median != 500 {
		t.Errorf("TPOT mean %g, TTFT mean %g, E2EL median %g", m.TPOT.Mean, m.TTFT.Mean, m.E2EL.Median)
	}
	if math.Abs(m.ITL.Mean-800.0/6) > 1e-9 || len(m.OutputLens) != 4 || m.OutputLens[3] != 0 || m.OutputLens[0] != 5 {
		t.Errorf("ITL mean %g (want 800/6), output lens %v", m.ITL.Mean, m.OutputLens)
	}
	if m.MaxConcurrentRequests != 3 {
		t.Errorf("peak concurrency %d, want 3", m.MaxConcurrentRequests)
	}
	// All 9 tokens land in the first second.
	if m.MaxOutputTokensPerS != 9 {
		t.Errorf("peak output tokens/s %g, want 9", m.MaxOutputTokensPerS)
	}
	if g := CalculateMetrics(outputs, time.Second, nil, Goodput{"e2el": 600}); g.RequestGoodput != 2 {
		t.Errorf("e2el goodput %g, want 2", g.RequestGoodput)
	}
	if g := CalculateMetrics(outputs, time.Second, nil, nil); g.RequestGoodput != 0 {
		t.Errorf("goodput without objectives %g", g.RequestGoodput)
	}
}

func TestPeakConcurrencyHalfOpen(t *testing.T) {
	ms := time.Millisecond
	// Back to back: one ends as the next starts, never two at once.
	outputs := []RequestOutput{out(ms, 100*ms, 1, 0), out(ms, 100*ms, 1, 100*ms), out(ms, 100*ms, 1, 200*ms)}
	if p := PeakConcurrency(outputs); p != 1 {
		t.Errorf("peak %d, want 1", p)
	}
	outputs = append(outputs, out(ms, 250*ms, 1, 50*ms))
	if p := PeakConcurrency(outputs); p != 2 {
		t.Errorf("peak %d, want 2", p)
	}
}

func TestTimeline(t *testing.T) {
	ms := time.Millisecond
	// Starts at 1 s (the origin); tokens at 1.1, 1.6, 2.1 s; in flight 1.0..2.1 s.
	outputs := []RequestOutput{out(100*ms, 1100*ms, 6, time.Second, 500*ms, 500*ms)}
	tl := NewTimeline(outputs, 500*ms)
	if tl.Origin != time.Second || len(tl.Tokens) != 3 {
		t.Fatalf("origin %v, %d buckets", tl.Origin, len(tl.Tokens))
	}
	// 2 tokens per chunk, over 0.5 s buckets: 4 tok/s each.
	for i, want := range []float64{4, 4, 4} {
		if tl.Tokens[i] != want {
			t.Errorf("bucket %d: %g tok/s, want %g", i, tl.Tokens[i], want)
		}
	}
	for i, want := range []float64{1, 1, 0.2} {
		if math.Abs(tl.Concurrent[i]-want) > 1e-9 {
			t.Errorf("bucket %d: %g in flight, want %g", i, tl.Concurrent[i], want)
		}
	}
}

func TestParseGoodput(t *testing.T) {
	g, err := ParseGoodput("ttft:500 tpot:50,e2el:1e4")
	if err != nil || g["ttft"] != 500 || g["tpot"] != 50 || g["e2el"] != 10000 || len(g) != 3 {
		t.Errorf("got %v, %v", g, err)
	}
	for _, bad := range []string{"ttft", "ttft:abc", "itl:5", "ttft:-1", "ttft:NaN"} {
		if _, err := ParseGoodput(bad); err == nil {
			t.Errorf("ParseGoodput(%q) accepted", bad)
		}
	}
}

func TestParseLists(t *testing.T) {
	ps, err := ParsePercentiles("50, 90,99.9")
	if err != nil || len(ps) != 3 || ps[2] != 99.9 {
		t.Errorf("percentiles %v %v", ps, err)
	}
	for _, bad := range []string{"", "101", "-1", "x"} {
		if _, err := ParsePercentiles(bad); err == nil {
			t.Errorf("ParsePercentiles(%q) accepted", bad)
		}
	}
	names, err := ParseMetricNames("ttft,TPOT,itl,e2el")
	if err != nil || len(names) != 4 || names[1] != "tpot" {
		t.Errorf("names %v %v", names, err)
	}
	if _, err := ParseMetricNames("ttft,foo"); err == nil {
		t.Error("ParseMetricNames accepted foo")
	}
	if PercentileName(99) != "99" || PercentileName(99.9) != "99.9" {
		t.Error("PercentileName")
	}
}

func TestParsePrometheusHistograms(t *testing.T) {
	text := `# HELP vllm:time_to_first_token_seconds x
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3
vllm:time_to_first_token_seconds_sum{model_name="a b} c",engine="0"} 1.5
vllm:time_to_first_token_seconds_sum{model_name="other \\"q\\"",engine="1"} 0.5
vllm:time_to_first_token_seconds_count{model_name="m"} 4
vllm:time_per_output_token_seconds_sum 0.2 1700000000000
vllm:time_per_output_token_seconds_count 10
broken{ 3
`
	h, err := ParsePrometheusHistograms(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := h["vllm:time_to_first_token_seconds"]; got != [2]float64{2, 4} {
		t.Errorf("TTFT totals %v, want [2 4]", got)
	}
	before := map[string][2]float64{"vllm:time_to_first_token_seconds": {1, 2}}
	s := ServerLatencyDelta(before, h)
	if s == nil || s.Prefix != "vllm" || s.TTFT != 500 || s.ITL != 20 || s.Requests != 2 {
		t.Errorf("delta %+v, want vllm TTFT 500 ms, ITL 20 ms over 2 requests", s)
	}
	if ServerLatencyDelta(h, h) != nil {
		t.Error("no movement must give nil")
	}
}

func FuzzParsePrometheusHistograms(f *testing.F) {
	f.Add("a_sum{x=\"1\"} 2\na_count 3\n")
	f.Add("# TYPE h histogram\nh_sum{l=\"}\\\"{\"} NaN\nh_count{} +Inf 17\n")
	f.Add("x{\"\n_sum 1")
	f.Fuzz(func(t *testing.T, text string) {
		h, err := ParsePrometheusHistograms(strings.NewReader(text))
		if err != nil {
			return
		}
		ServerLatencyDelta(nil, h)
		ServerLatencyDelta(h, h)
	})
}
