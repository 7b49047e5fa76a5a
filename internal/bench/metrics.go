package bench

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stats summarizes one latency metric in milliseconds, as numpy computes it (population
// standard deviation; percentiles interpolated linearly). All are 0 without samples.
type Stats struct {
	Mean, Median, Std float64
	// Percentiles holds one value per asked percentile, in the order asked.
	Percentiles []Percentile
}

// Percentile is one percentile of a metric.
type Percentile struct {
	P     float64 // such as 99 or 99.9
	Value float64 // milliseconds
}

// Metrics are a run's figures, as vLLM's BenchmarkMetrics.
type Metrics struct {
	Completed, Failed       int
	TotalInput, TotalOutput int
	// OutputLens is each request's output token count (0 for a failed one).
	OutputLens []int

	RequestThroughput    float64 // completed requests per second
	RequestGoodput       float64 // requests meeting every SLO per second
	OutputThroughput     float64 // output tokens per second
	TotalTokenThroughput float64 // input and output tokens per second

	TTFT, TPOT, ITL, E2EL Stats

	// MaxOutputTokensPerS is the most output tokens in one one-second bucket.
	MaxOutputTokensPerS float64
	// MaxConcurrentRequests is the most requests in flight at one moment.
	MaxConcurrentRequests int
}

// Goodput holds service level objectives in milliseconds; a request counts toward goodput
// when it meets every one given. Keys are "ttft", "tpot" and "e2el".
type Goodput map[string]float64

// ParseGoodput reads objectives such as "ttft:500 tpot:50" (pairs separated by spaces or
// commas, each KEY:MILLISECONDS).
func ParseGoodput(s string) (Goodput, error) {
	g := Goodput{}
	for _, pair := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		k, v, ok := strings.Cut(pair, ":")
		if !ok {
			return nil, fmt.Errorf("goodput %q: want KEY:VALUE pairs, the value in milliseconds", pair)
		}
		k = strings.ToLower(strings.TrimSpace(k))
		if k != "ttft" && k != "tpot" && k != "e2el" {
			return nil, fmt.Errorf("goodput %q: the metric must be ttft, tpot or e2el", pair)
		}
		ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || ms < 0 || math.IsNaN(ms) {
			return nil, fmt.Errorf("goodput %q: want a non-negative number of milliseconds", pair)
		}
		g[k] = ms
	}
	return g, nil
}

// ParsePercentiles reads a list such as "50,90,99.9"; each must lie in [0, 100].
func ParsePercentiles(s string) ([]float64, error) {
	var ps []float64
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || p < 0 || p > 100 || math.IsNaN(p) {
			return nil, fmt.Errorf("metric percentile %q: want a number in [0, 100]", f)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// ParseMetricNames reads a list of ttft, tpot, itl and e2el.
func ParseMetricNames(s string) ([]string, error) {
	var names []string
	for _, f := range strings.Split(s, ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		switch f {
		case "ttft", "tpot", "itl", "e2el":
			names = append(names, f)
		default:
			return nil, fmt.Errorf("percentile metric %q: want ttft, tpot, itl or e2el", f)
		}
	}
	return names, nil
}

// PercentileName formats p as vLLM does in keys and labels: "99", "99.9".
func PercentileName(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }

// Quantile returns the q-th percentile (0..100) of sorted values, interpolating linearly
// between neighbours (numpy's default). It returns 0 for no values.
func Quantile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}

// Summarize returns the statistics of xs (milliseconds) with the given percentiles.
func Summarize(xs []float64, percentiles []float64) Stats {
	st := Stats{}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) > 0 {
		for _, x := range s {
			st.Mean += x
		}
		st.Mean /= float64(len(s))
		for _, x := range s {
			st.Std += (x - st.Mean) * (x - st.Mean)
		}
		st.Std = math.Sqrt(st.Std / float64(len(s)))
		st.Median = Quantile(s, 50)
	}
	for _, p := range percentiles {
		st.Percentiles = append(st.Percentiles, Percentile{P: p, Value: Quantile(s, p)})
	}
	return st
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// TPOT returns a request's time per output token after the first, in milliseconds:
// (latency - ttft) / (output tokens - 1), and 0 with fewer than two tokens.
func TPOT(o RequestOutput) float64 {
	if o.OutputTokens <= 1 {
		return 0
	}
	return ms(o.Latency-o.TTFT) / float64(o.OutputTokens-1)
}

// CalculateMetrics computes the run's figures from its outputs, as vLLM's
// calculate_metrics: TTFT, E2EL and TPOT per successful request (TPOT only with two or
// more output tokens), ITL per chunk gap, throughput over the duration dur, goodput over
// the objectives g (a request with fewer than two tokens has TPOT 0 there).
func CalculateMetrics(outputs []RequestOutput, dur time.Duration, percentiles []float64, g Goodput) Metrics {
	m := Metrics{OutputLens: make([]int, len(outputs))}
	var ttfts, tpots, itls, e2els []float64
	good := 0
	for i, o := range outputs {
		if !o.Success {
			m.Failed++
			continue
		}
		m.Completed++
		m.OutputLens[i] = o.OutputTokens
		m.TotalInput += o.PromptLen
		m.TotalOutput += o.OutputTokens
		tpot := TPOT(o)
		if o.OutputTokens > 1 {
			tpots = append(tpots, tpot)
		}
		ttfts = append(ttfts, ms(o.TTFT))
		e2els = append(e2els, ms(o.Latency))
		for _, d := range o.ITL {
			itls = append(itls, ms(d))
		}
		if len(g) > 0 && meets(g, ms(o.TTFT), tpot, ms(o.Latency)) {
			good++
		}
	}
	if s := dur.Seconds(); s > 0 {
		m.RequestThroughput = float64(m.Completed) / s
		m.RequestGoodput = float64(good) / s
		m.OutputThroughput = float64(m.TotalOutput) / s
		m.TotalTokenThroughput = float64(m.TotalInput+m.TotalOutput) / s
	}
	m.TTFT = Summarize(ttfts, percentiles)
	m.TPOT = Summarize(tpots, percentiles)
	m.ITL = Summarize(itls, percentiles)
	m.E2EL = Summarize(e2els, percentiles)
	tl := NewTimeline(outputs, time.Second)
	m.MaxOutputTokensPerS = slices.Max(append(tl.Tokens, 0))
	m.MaxConcurrentRequests = PeakConcurrency(outputs)
	return m
}

// meets reports whether a request's latencies are within every objective.
func meets(g Goodput, ttft, tpot, e2el float64) bool {
	for k, slo := range g {
		v := map[string]float64{"ttft": ttft, "tpot": tpot, "e2el": e2el}[k]
		if v > slo {
			return false
		}
	}
	return true
}

// PeakConcurrency returns the most successful requests in flight at one moment, each
// occupying [Start, Start+Latency) (an end before a start at the same instant).
func PeakConcurrency(outputs []RequestOutput) int {
	type ev struct {
		t time.Duration
		d int
	}
	var evs []ev
	for _, o := range outputs {
		if o.Success {
			evs = append(evs, ev{o.Start, 1}, ev{o.Start + o.Latency, -1})
		}
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t != evs[j].t {
			return evs[i].t < evs[j].t
		}
		return evs[i].d < evs[j].d
	})
	cur, peak := 0, 0
	for _, e := range evs {
		cur += e.d
		peak = max(peak, cur)
	}
	return peak
}

// Timeline is the run seen in fixed buckets of time from the first successful request's
// start: output tokens produced and requests in flight per bucket.
type Timeline struct {
	Bucket     time.Duration
	Origin     time.Duration // the first start, from the benchmark's start
	Tokens     []float64     // output tokens per bucket, divided by the bucket in seconds
	Concurrent []float64     // mean requests in flight over each bucket
}

// NewTimeline buckets successful outputs. A request's output tokens are spread evenly over
// its token-bearing chunks, which arrive at Start+TTFT and then after each ITL gap.
func NewTimeline(outputs []RequestOutput, bucket time.Duration) Timeline {
	tl := Timeline{Bucket: bucket}
	first, last, found := time.Duration(0), time.Duration(0), false
	for _, o := range outputs {
		if !o.Success {
			continue
		}
		if !found || o.Start < first {
			first = o.Start
		}
		last = max(last, o.Start+o.Latency)
		found = true
	}
	if !found || bucket <= 0 {
		return tl
	}
	tl.Origin = first
	n := int((last-first)/bucket) + 1
	tl.Tokens = make([]float64, n)
	tl.Concurrent = make([]float64, n)
	for _, o := range outputs {
		if !o.Success {
			continue
		}
		per := float64(o.OutputTokens) / float64(len(o.ITL)+1)
		t := o.Start + o.TTFT
		for i := 0; i <= len(o.ITL); i++ {
			if i > 0 {
				t += o.ITL[i-1]
			}
			if b := int((t - first) / bucket); b >= 0 && b < n {
				tl.Tokens[b] += per
			}
		}
		// The request adds the share of each bucket it spent in flight.
		s, e := o.Start-first, o.Start+o.Latency-first
		for b := max(int(s/bucket), 0); b < n && time.Duration(b)*bucket < e; b++ {
			lo, hi := max(s, time.Duration(b)*bucket), min(e, time.Duration(b+1)*bucket)
			if hi > lo {
				tl.Concurrent[b] += float64(hi-lo) / float64(bucket)
			}
		}
	}
	for i := range tl.Tokens {
		tl.Tokens[i] /= bucket.Seconds()
	}
	return tl
}
