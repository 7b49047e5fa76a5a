package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Report describes a run for its summary and its JSON result.
type Report struct {
	Backend     string // "openai" (completions) or "openai-chat", as vLLM's --backend
	Label       string // result label; empty: the backend
	ModelID     string
	TokenizerID string // empty when no local tokenizer was used
	NumPrompts  int
	RequestRate float64 // +Inf: all at once
	Burstiness  float64
	// MaxConcurrency is the cap on requests in flight; 0 for none.
	MaxConcurrency int
	// Timed is set for trace replay at the trace's timestamps.
	Timed bool
	// PercentileMetrics are the metrics printed with percentiles: ttft, tpot, itl, e2el.
	PercentileMetrics []string
	Percentiles       []float64
	Goodput           Goodput
}

// metricInfo names a metric as vLLM's summary does.
type metricInfo struct {
	key, short, header string
}

var metricInfos = []metricInfo{
	{"ttft", "TTFT", "Time to First Token"},
	{"tpot", "TPOT", "Time per Output Token (excl. 1st token)"},
	{"itl", "ITL", "Inter-token Latency"},
	{"e2el", "E2EL", "End-to-end Latency"},
}

func (m Metrics) stats(key string) Stats {
	switch key {
	case "ttft":
		return m.TTFT
	case "tpot":
		return m.TPOT
	case "itl":
		return m.ITL
	}
	return m.E2EL
}

// center pads s to width with c on both sides, the extra one on the right (Python's '^').
func center(s string, c byte, width int) string {
	pad := max(0, width-len(s))
	return strings.Repeat(string(c), pad/2) + s + strings.Repeat(string(c), pad-pad/2)
}

// MaxErrorsShown is how many failed requests' messages the summary prints.
const MaxErrorsShown = 10

// WriteSummary prints the run's figures in the layout of vLLM's `bench serve`, preceded by
// the first failed requests' errors.
func WriteSummary(w io.Writer, rep Report, res *Result) {
	m := res.Metrics
	if m.Failed > 0 {
		fmt.Fprintf(w, "Failed requests during benchmark run detected (capping to %d):\n", MaxErrorsShown)
		n := 0
		for _, o := range res.Outputs {
			if !o.Success && n < MaxErrorsShown {
				fmt.Fprintf(w, "Error %d: %s\n", n, o.Error)
				n++
			}
		}
	}
	line := func(label string, v any) {
		switch x := v.(type) {
		case float64:
			fmt.Fprintf(w, "%-40s %-10.2f\n", label, x)
		default:
			fmt.Fprintf(w, "%-40s %-10v\n", label, x)
		}
	}
	fmt.Fprintln(w, center(" Serving Benchmark Result ", '=', 50))
	line("Successful requests:", m.Completed)
	line("Failed requests:", m.Failed)
	if rep.MaxConcurrency > 0 {
		line("Maximum request concurrency:", rep.MaxConcurrency)
	}
	if !rep.Timed && !math.IsInf(rep.RequestRate, 1) {
		line("Request rate configured (RPS):", rep.RequestRate)
	}
	line("Benchmark duration (s):", res.Duration.Seconds())
	line("Total input tokens:", m.TotalInput)
	line("Total generated tokens:", m.TotalOutput)
	line("Request throughput (req/s):", m.RequestThroughput)
	if len(rep.Goodput) > 0 {
		line("Request goodput (req/s):", m.RequestGoodput)
	}
	line("Output token throughput (tok/s):", m.OutputThroughput)
	line("Peak output token throughput (tok/s):", m.MaxOutputTokensPerS)
	line("Peak concurrent requests:", float64(m.MaxConcurrentRequests))
	line("Total Token throughput (tok/s):", m.TotalTokenThroughput)
	for _, mi := range metricInfos {
		if !selected(rep.PercentileMetrics, mi.key) {
			continue
		}
		st := m.stats(mi.key)
		fmt.Fprintln(w, center(mi.header, '-', 50))
		line(fmt.Sprintf("Mean %s (ms):", mi.short), st.Mean)
		line(fmt.Sprintf("Median %s (ms):", mi.short), st.Median)
		for _, p := range st.Percentiles {
			line(fmt.Sprintf("P%s %s (ms):", PercentileName(p.P), mi.short), p.Value)
		}
	}
	if res.SpecDecode != nil {
		writeSpecDecode(w, res.SpecDecode, "%-10v")
	}
	if sv := res.Server; sv != nil {
		fmt.Fprintln(w, center("Server-side Latency ("+sv.Prefix+" /metrics)", '-', 50))
		line("Server mean TTFT (ms):", sv.TTFT)
		line("Server mean ITL (ms):", sv.ITL)
		line("Server mean E2EL (ms):", sv.E2EL)
	}
	fmt.Fprintln(w, center(" Energy (server /metrics) ", '-', 50))
	if e := res.Energy; e != nil {
		line("Energy (J):", e.Joules)
		fmt.Fprintf(w, "%-40s %-10.4f\n", "Energy per output token (J):", e.JoulesPerToken)
		line("Average power (W):", e.Watts)
		fmt.Fprintf(w, "%-40s %s\n", "Measured by:", strings.Join(e.Sources, ", "))
	} else {
		fmt.Fprintln(w, "not available (the server exports no kvasir:energy_joules_total)")
	}
	fmt.Fprintln(w, strings.Repeat("=", 50))
}

func selected(names []string, key string) bool {
	for _, n := range names {
		if n == key {
			return true
		}
	}
	return false
}

// field is one key of an ordered JSON object.
type field struct {
	key   string
	value any
}

// object is a JSON object that keeps its keys in order, as vLLM's result files do.
type object []field

// MarshalJSON writes the fields in order.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(f.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, fmt.Errorf("result key %s: %w", f.key, err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// finite replaces NaN and infinities, which JSON cannot hold, by 0.
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// ResultJSON returns the run's result with vLLM's keys: the setup (date, backend, model_id,
// num_prompts, request_rate, burstiness, max_concurrency), the totals and throughputs, the
// per-request lists (input_lens, output_lens, ttfts, itls, latencies, start_times,
// generated_texts, errors; times in seconds), and mean/median/std/pNN of each selected
// metric in milliseconds.
func ResultJSON(rep Report, res *Result, now time.Time) ([]byte, error) {
	m := res.Metrics
	label := rep.Label
	var rate any = "inf"
	if !math.IsInf(rep.RequestRate, 1) {
		rate = rep.RequestRate
	}
	var maxConc any
	if rep.MaxConcurrency > 0 {
		maxConc = rep.MaxConcurrency
	}
	var tokID any
	if rep.TokenizerID != "" {
		tokID = rep.TokenizerID
	}
	var goodput any
	if len(rep.Goodput) > 0 {
		goodput = finite(m.RequestGoodput)
	}
	n := len(res.Outputs)
	inputLens, ttfts, latencies, starts, queues := make([]int, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	itls, texts, errs := make([][]float64, n), make([]string, n), make([]string, n)
	for i, o := range res.Outputs {
		inputLens[i] = o.PromptLen
		ttfts[i], latencies[i] = seconds(o.TTFT), seconds(o.Latency)
		starts[i], queues[i] = seconds(o.Start), seconds(o.QueueTime)
		itls[i] = make([]float64, len(o.ITL))
		for j, d := range o.ITL {
			itls[i][j] = seconds(d)
		}
		texts[i], errs[i] = o.GeneratedText, o.Error
	}
	o := object{
		{"date", now.Format("20060102-150405")},
		{"endpoint_type", rep.Backend},
		{"backend", rep.Backend},
		{"label", nilIfEmpty(label)},
		{"model_id", rep.ModelID},
		{"tokenizer_id", tokID},
		{"num_prompts", rep.NumPrompts},
		{"request_rate", rate},
		{"burstiness", rep.Burstiness},
		{"max_concurrency", maxConc},
		{"duration", res.Duration.Seconds()},
		{"completed", m.Completed},
		{"failed", m.Failed},
		{"total_input_tokens", m.TotalInput},
		{"total_output_tokens", m.TotalOutput},
		{"request_throughput", finite(m.RequestThroughput)},
		{"request_goodput", goodput},
		{"output_throughput", finite(m.OutputThroughput)},
		{"total_token_throughput", finite(m.TotalTokenThroughput)},
		{"input_lens", inputLens},
		{"output_lens", m.OutputLens},
		{"ttfts", ttfts},
		{"itls", itls},
		{"latencies", latencies},
		{"start_times", starts},
		{"queue_times", queues},
		{"generated_texts", texts},
		{"errors", errs},
		{"max_output_tokens_per_s", finite(m.MaxOutputTokensPerS)},
		{"max_concurrent_requests", m.MaxConcurrentRequests},
	}
	for _, mi := range metricInfos {
		if !selected(rep.PercentileMetrics, mi.key) {
			continue
		}
		st := m.stats(mi.key)
		o = append(o,
			field{"mean_" + mi.key + "_ms", finite(st.Mean)},
			field{"median_" + mi.key + "_ms", finite(st.Median)},
			field{"std_" + mi.key + "_ms", finite(st.Std)})
		for _, p := range st.Percentiles {
			o = append(o, field{"p" + PercentileName(p.P) + "_" + mi.key + "_ms", finite(p.Value)})
		}
	}
	if sd := res.SpecDecode; sd != nil {
		o = append(o, field{"spec_decode_acceptance_rate", finite(sd.AcceptanceRate)},
			field{"spec_decode_acceptance_length", finite(sd.AcceptanceLength)},
			field{"spec_decode_num_drafts", sd.NumDrafts}, field{"spec_decode_draft_tokens", sd.DraftTokens},
			field{"spec_decode_accepted_tokens", sd.AcceptedTokens},
			field{"spec_decode_per_position_acceptance_rates", sd.PerPosition})
	}
	if sv := res.Server; sv != nil {
		o = append(o, field{"server_metrics_prefix", sv.Prefix}, field{"server_mean_ttft_ms", finite(sv.TTFT)},
			field{"server_mean_itl_ms", finite(sv.ITL)}, field{"server_mean_e2el_ms", finite(sv.E2EL)})
	}
	if e := res.Energy; e != nil {
		o = append(o, field{"energy_joules", finite(e.Joules)}, field{"energy_per_output_token_j", finite(e.JoulesPerToken)},
			field{"average_power_w", finite(e.Watts)}, field{"energy_sources", e.Sources})
	}
	return json.MarshalIndent(o, "", "  ")
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// ResultFilename is vLLM's default result file name:
// LABEL-RATEqps[-concurrencyN]-MODEL-DATE.json, the model's last path element.
func ResultFilename(rep Report, now time.Time) string {
	label := rep.Label
	if label == "" {
		label = rep.Backend
	}
	rate := "inf"
	if !math.IsInf(rep.RequestRate, 1) {
		rate = PercentileName(rep.RequestRate)
	}
	conc := ""
	if rep.MaxConcurrency > 0 {
		conc = fmt.Sprintf("-concurrency%d", rep.MaxConcurrency)
	}
	model := rep.ModelID[strings.LastIndex(rep.ModelID, "/")+1:]
	return fmt.Sprintf("%s-%sqps%s-%s-%s.json", label, rate, conc, model, now.Format("20060102-150405"))
}
