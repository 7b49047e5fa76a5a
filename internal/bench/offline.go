package bench

import (
	"context"
	"fmt"
	"github.com/kvasir-llm/kvasir/internal/energy"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/kvasir-llm/kvasir"
)

// OfflineOptions is what `kvasir bench offline` is asked, besides the engine's settings.
type OfflineOptions struct {
	NumPrompts int
	// InputLen random prompt tokens per request follow PrefixLen random tokens every
	// prompt shares.
	InputLen, PrefixLen int
	// OutputLen is max_tokens (ShareGPT: of a conversation without a reply).
	OutputLen int
	// DatasetPath names a ShareGPT JSON file whose first turns are the prompts, instead of
	// random tokens ("").
	DatasetPath string
	// Seed draws the random prompts (and shuffles the ShareGPT conversations).
	Seed uint64
	// Concurrency caps the requests in flight (0: all at once).
	Concurrency int
}

// OfflineRequest is one request of an offline run: prompt token ids, the output length and
// the structured output its reply is held to (nil: none), compiled when it is sent (a
// repeated constraint from the engine's cache).
type OfflineRequest struct {
	Prompt     []int32
	MaxTokens  int
	Structured *kvasir.StructuredOutput
	// Adapter, when set, is the LoRA adapter the request runs with.
	Adapter *kvasir.LoRAAdapter
}

// OfflineRequests makes the workload of o for engine e with the datasets of bench serve:
// random ids of e's ordinary tokens, or ShareGPT first turns tokenized as e does. Requests
// that do not fit e's context are left out (the note says how many); none left is an
// error.
func OfflineRequests(ctx context.Context, e *kvasir.Engine, o OfflineOptions, note io.Writer) ([]OfflineRequest, error) {
	tok := e.Loaded().Tokenizer()
	if tok == nil {
		return nil, fmt.Errorf("bench offline: the model has no tokenizer to draw prompts from")
	}
	b, err := NewPromptBuilder(ctx, FromTokenizer(tok), nil, false)
	if err != nil {
		return nil, fmt.Errorf("bench offline: %w", err)
	}
	c := DatasetConfig{Name: DatasetRandom, NumPrompts: o.NumPrompts, Seed: o.Seed,
		RandomInputLen: o.InputLen, RandomOutputLen: o.OutputLen, RandomPrefixLen: o.PrefixLen}
	if o.DatasetPath != "" {
		c = DatasetConfig{Name: DatasetShareGPT, Path: o.DatasetPath, NumPrompts: o.NumPrompts, Seed: o.Seed, ShareGPTNoReplyLen: o.OutputLen}
	}
	samples, err := LoadDataset(ctx, c, b)
	if err != nil {
		return nil, err
	}
	var reqs []OfflineRequest
	for _, s := range samples {
		r := OfflineRequest{MaxTokens: s.OutputLen}
		if s.TokenIDs != nil {
			for _, id := range s.TokenIDs {
				r.Prompt = append(r.Prompt, int32(id))
			}
		} else if r.Prompt, err = e.Tokenize(s.Prompt, true); err != nil {
			return nil, err
		}
		if len(r.Prompt) == 0 || len(r.Prompt)+r.MaxTokens > e.MaxModelLen() {
			continue
		}
		reqs = append(reqs, r)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("bench offline: no request of the workload fits the %d-token context", e.MaxModelLen())
	}
	if left := len(samples) - len(reqs); left > 0 && note != nil {
		fmt.Fprintf(note, "bench offline: %d of %d requests do not fit the %d-token context and are left out\n", left, len(samples), e.MaxModelLen())
	}
	return reqs, nil
}

// OfflineResult holds an offline run's figures under vLLM's benchmark result keys, plus
// the engine's own.
type OfflineResult struct {
	Duration             float64 `json:"duration"`
	Completed            int     `json:"completed"`
	Failed               int     `json:"failed"`
	TotalInputTokens     int     `json:"total_input_tokens"`
	TotalOutputTokens    int     `json:"total_output_tokens"`
	RequestThroughput    float64 `json:"request_throughput"`
	OutputThroughput     float64 `json:"output_throughput"`
	TotalTokenThroughput float64 `json:"total_token_throughput"`
	MaxConcurrency       int     `json:"max_concurrency"`
	MeanTTFTms           float64 `json:"mean_ttft_ms"`
	MedianTTFTms         float64 `json:"median_ttft_ms"`
	StdTTFTms            float64 `json:"std_ttft_ms"`
	P99TTFTms            float64 `json:"p99_ttft_ms"`
	MeanTPOTms           float64 `json:"mean_tpot_ms"`
	MedianTPOTms         float64 `json:"median_tpot_ms"`
	StdTPOTms            float64 `json:"std_tpot_ms"`
	P99TPOTms            float64 `json:"p99_tpot_ms"`
	MeanITLms            float64 `json:"mean_itl_ms"`
	MedianITLms          float64 `json:"median_itl_ms"`
	StdITLms             float64 `json:"std_itl_ms"`
	P99ITLms             float64 `json:"p99_itl_ms"`
	MeanE2ELms           float64 `json:"mean_e2el_ms"`
	MedianE2ELms         float64 `json:"median_e2el_ms"`
	StdE2ELms            float64 `json:"std_e2el_ms"`
	P99E2ELms            float64 `json:"p99_e2el_ms"`
	PrefixCacheHitRate   float64 `json:"prefix_cache_hit_rate"`
	NumPreemptions       int64   `json:"num_preemptions"`
	// CPUSeconds is the process's user plus system CPU time over the run (0 where it
	// cannot be read), and OutputTokensPerCPUSecond the output tokens per such second: on
	// a machine shared with other work they move less than the wall-clock rates.
	CPUSeconds               float64 `json:"cpu_seconds,omitempty"`
	OutputTokensPerCPUSecond float64 `json:"output_tokens_per_cpu_second,omitempty"`
	// EngineSteps counts the engine steps (forward passes of the target) the run took;
	// ForcedTokens the output tokens jump-forward appended without sampling.
	EngineSteps  int64 `json:"engine_steps"`
	ForcedTokens int64 `json:"structured_forced_tokens"`
	// Per request, in submission order (vLLM's keys; TTFTs in seconds, 0 for a failure).
	InputLens  []int     `json:"input_lens"`
	OutputLens []int     `json:"output_lens"`
	TTFTs      []float64 `json:"ttfts"`
	// SpecDecode holds speculative decoding's figures (its spec_decode_* keys) when the
	// engine speculates; nil (and no keys) otherwise.
	*SpecDecode
	// Energy is the run's energy (joules per output token, average watts), or why it is
	// not available; nil when not measured (set by the caller, which holds the meter).
	Energy *energy.Report `json:"energy,omitempty"`
}

// Offline pushes reqs through e, at most concurrency at a time (0: all), each with params
// and its own max_tokens, and computes the figures as bench serve does (CalculateMetrics).
func Offline(ctx context.Context, e *kvasir.Engine, reqs []OfflineRequest, concurrency int, params kvasir.SamplingParams) OfflineResult {
	if concurrency <= 0 || concurrency > len(reqs) {
		concurrency = len(reqs)
	}
	before := e.Stats()
	outputs := make([]RequestOutput, len(reqs))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	cpu0, cpuOK0 := ProcessCPU()
	start := time.Now()
	for i, r := range reqs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			outputs[i] = offlineOne(ctx, e, r, params, start)
		})
	}
	wg.Wait()
	dur := time.Since(start)
	cpu1, cpuOK1 := ProcessCPU()
	after := e.Stats()

	m := CalculateMetrics(outputs, dur, []float64{99}, nil)
	p99 := func(s Stats) float64 { return s.Percentiles[0].Value }
	res := OfflineResult{
		Duration: dur.Seconds(), Completed: m.Completed, Failed: m.Failed, MaxConcurrency: concurrency,
		TotalInputTokens: m.TotalInput, TotalOutputTokens: m.TotalOutput,
		RequestThroughput: m.RequestThroughput, OutputThroughput: m.OutputThroughput, TotalTokenThroughput: m.TotalTokenThroughput,
		MeanTTFTms: m.TTFT.Mean, MedianTTFTms: m.TTFT.Median, StdTTFTms: m.TTFT.Std, P99TTFTms: p99(m.TTFT),
		MeanTPOTms: m.TPOT.Mean, MedianTPOTms: m.TPOT.Median, StdTPOTms: m.TPOT.Std, P99TPOTms: p99(m.TPOT),
		MeanITLms: m.ITL.Mean, MedianITLms: m.ITL.Median, StdITLms: m.ITL.Std, P99ITLms: p99(m.ITL),
		MeanE2ELms: m.E2EL.Mean, MedianE2ELms: m.E2EL.Median, StdE2ELms: m.E2EL.Std, P99E2ELms: p99(m.E2EL),
		NumPreemptions: after.Preemptions - before.Preemptions,
		EngineSteps:    after.Steps - before.Steps, ForcedTokens: after.ForcedTokens - before.ForcedTokens,
	}
	if cpu := (cpu1 - cpu0).Seconds(); cpuOK0 && cpuOK1 && cpu > 0 {
		res.CPUSeconds = cpu
		res.OutputTokensPerCPUSecond = float64(res.TotalOutputTokens) / cpu
	}
	if q := after.PrefixQueries - before.PrefixQueries; q > 0 {
		res.PrefixCacheHitRate = float64(after.PrefixHits-before.PrefixHits) / float64(q)
	}
	if c := e.Speculative(); c != nil {
		res.SpecDecode = SpecDecodeFromStats(before, after, c.NumSpeculativeTokens)
	}
	for _, o := range outputs {
		res.InputLens = append(res.InputLens, o.PromptLen)
		res.OutputLens = append(res.OutputLens, o.OutputTokens)
		res.TTFTs = append(res.TTFTs, o.TTFT.Seconds())
	}
	return res
}

// offlineOne sends one request and times its outputs as a RequestOutput (start is the
// run's start).
func offlineOne(ctx context.Context, e *kvasir.Engine, r OfflineRequest, params kvasir.SamplingParams, start time.Time) RequestOutput {
	out := RequestOutput{PromptLen: len(r.Prompt), UsageReported: true}
	sent := time.Now()
	out.Start = sent.Sub(start)
	params.MaxTokens = r.MaxTokens
	req := kvasir.Request{PromptTokens: r.Prompt, Params: params, Adapter: r.Adapter}
	if r.Structured != nil {
		proc, err := e.Constrain(*r.Structured)
		if err != nil {
			out.Error = err.Error()
			return out
		}
		req.Processors = []kvasir.Processor{proc}
	}
	ch, err := e.Generate(ctx, req)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	last := sent
	for o := range ch {
		now := time.Now()
		if len(o.TokenIDs) > 0 {
			if out.OutputTokens == 0 {
				out.TTFT = now.Sub(sent)
			} else {
				out.ITL = append(out.ITL, now.Sub(last))
			}
			last = now
			out.OutputTokens += len(o.TokenIDs)
		}
		if o.Err != nil {
			out.Error = o.Err.Error()
		}
	}
	out.Latency = last.Sub(sent)
	out.Success = out.Error == "" && out.OutputTokens > 0
	return out
}

// WriteOfflineSummary prints the run's figures as `kvasir bench offline` does.
func WriteOfflineSummary(w io.Writer, r OfflineResult) {
	fmt.Fprintf(w, "============ Offline Benchmark Result ============\n")
	fmt.Fprintf(w, "%-40s %10d\n", "Successful requests:", r.Completed)
	fmt.Fprintf(w, "%-40s %10d\n", "Failed requests:", r.Failed)
	fmt.Fprintf(w, "%-40s %10d\n", "Maximum request concurrency:", r.MaxConcurrency)
	fmt.Fprintf(w, "%-40s %10.2f\n", "Benchmark duration (s):", r.Duration)
	fmt.Fprintf(w, "%-40s %10d\n", "Total input tokens:", r.TotalInputTokens)
	fmt.Fprintf(w, "%-40s %10d\n", "Total generated tokens:", r.TotalOutputTokens)
	fmt.Fprintf(w, "%-40s %10.2f\n", "Request throughput (req/s):", r.RequestThroughput)
	fmt.Fprintf(w, "%-40s %10.2f\n", "Output token throughput (tok/s):", r.OutputThroughput)
	fmt.Fprintf(w, "%-40s %10.2f\n", "Total token throughput (tok/s):", r.TotalTokenThroughput)
	if r.CPUSeconds > 0 {
		fmt.Fprintf(w, "%-40s %10.2f\n", "CPU time, user+system (s):", r.CPUSeconds)
		fmt.Fprintf(w, "%-40s %10.2f\n", "Output tokens per CPU-second:", r.OutputTokensPerCPUSecond)
	}
	fmt.Fprintf(w, "%-40s %10.2f\n", "Prefix cache hit rate (%):", 100*r.PrefixCacheHitRate)
	fmt.Fprintf(w, "%-40s %10d\n", "Preemptions:", r.NumPreemptions)
	fmt.Fprintf(w, "%-40s %10d\n", "Engine steps:", r.EngineSteps)
	if r.ForcedTokens > 0 {
		fmt.Fprintf(w, "%-40s %10d\n", "Forced tokens (jump-forward):", r.ForcedTokens)
	}
	for _, m := range []struct {
		name                   string
		mean, median, std, p99 float64
	}{
		{"Time to First Token", r.MeanTTFTms, r.MedianTTFTms, r.StdTTFTms, r.P99TTFTms},
		{"Time per Output Token (excl. 1st token)", r.MeanTPOTms, r.MedianTPOTms, r.StdTPOTms, r.P99TPOTms},
		{"Inter-token Latency", r.MeanITLms, r.MedianITLms, r.StdITLms, r.P99ITLms},
		{"End-to-end Latency", r.MeanE2ELms, r.MedianE2ELms, r.StdE2ELms, r.P99E2ELms},
	} {
		fmt.Fprintf(w, "%s\n", center(" "+m.name+" ", '-', 50))
		fmt.Fprintf(w, "%-40s %10.2f\n%-40s %10.2f\n%-40s %10.2f\n", "Mean (ms):", m.mean, "Median (ms):", m.median, "P99 (ms):", m.p99)
	}
	if r.SpecDecode != nil {
		writeSpecDecode(w, r.SpecDecode, "%10v")
	}
	if e := r.Energy; e != nil {
		fmt.Fprintf(w, "%s\n", center(" Energy ", '-', 50))
		if e.Available {
			fmt.Fprintf(w, "%-40s %10.2f\n%-40s %10.4f\n%-40s %10.1f\n", "Energy (J):", e.Joules, "Energy per output token (J):", e.JoulesPerToken,
				"Average power (W):", e.Watts)
			fmt.Fprintf(w, "%-40s %s\n", "Measured by:", strings.Join(e.Sources, ", "))
		} else {
			fmt.Fprintf(w, "not available (%s)\n", e.Reason)
		}
	}
	fmt.Fprintln(w, strings.Repeat("=", 50))
}
