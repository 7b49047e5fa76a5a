package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvasir-llm/kvasir"
)

func init() {
	registerBench(benchmark{name: "offline", summary: "throughput and latency of N requests pushed through the engine at once", run: benchOffline})
}

// offlineRequest is one benchmark request: prompt token ids and the output length asked.
type offlineRequest struct {
	prompt    []int32
	maxTokens int
}

// offlineTiming is what one request measured.
type offlineTiming struct {
	ttft, e2e time.Duration
	itl       []time.Duration
	output    int
	input     int
	err       error
}

// offlineResult holds the figures under vLLM's benchmark result keys, plus the engine's own.
type offlineResult struct {
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
	// Per request, in submission order (vLLM's keys; TTFTs in seconds, 0 for a failure).
	InputLens  []int     `json:"input_lens"`
	OutputLens []int     `json:"output_lens"`
	TTFTs      []float64 `json:"ttfts"`
}

func benchOffline(args []string) error {
	fs := newFlags("bench offline", "-m MODEL --num-prompts N --input-len L --output-len L [--max-concurrency C] [--prefix-len P] [--dataset-path sharegpt.json] [--ignore-eos] [--json]")
	numPrompts := fs.Int("num-prompts", 32, "number of requests")
	inputLen := fs.Int("input-len", 128, "random prompt tokens per request (after the shared prefix)")
	outputLen := fs.Int("output-len", 64, "output tokens per request (ShareGPT: when the file has no reply)")
	prefixLen := fs.Int("prefix-len", 0, "random tokens shared by every prompt, before its own")
	concurrency := fs.Int("max-concurrency", 0, "requests in flight at once (0: all)")
	dataset := fs.String("dataset-path", "", "ShareGPT JSON file to take prompts from instead of random tokens")
	ignoreEOS := fs.Bool("ignore-eos", false, "generate the full output length past end-of-sequence tokens")
	seed := fs.Uint64("seed", 0, "random seed for prompts")
	asJSON := fs.Bool("json", false, "print the results as JSON (vLLM's keys)")
	ef := addEngineFlags(fs, allEngineFlags)
	sf := addSamplingFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if ef.model == "" || fs.NArg() > 0 || *numPrompts <= 0 || *outputLen <= 0 || *inputLen < 0 || *prefixLen < 0 {
		fs.Usage()
		return fmt.Errorf("need -m, a positive --num-prompts and --output-len")
	}
	e, err := ef.openEngine(nil)
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Fprintln(os.Stderr, e.KVCacheSizing())

	var reqs []offlineRequest
	if *dataset != "" {
		reqs, err = shareGPTRequests(e, *dataset, *numPrompts, *outputLen)
	} else {
		reqs = randomRequests(e.VocabSize(), *numPrompts, *prefixLen, *inputLen, *outputLen, *seed)
	}
	if err != nil {
		return err
	}
	params := sf.params(e.SamplingDefaults())
	params.IgnoreEOS = *ignoreEOS
	res := runOffline(e, reqs, *concurrency, params)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printOffline(res)
	return nil
}

// randomRequests makes prompts of random token ids (avoiding the first 3 ids, usually
// special), sharing a prefix of prefixLen tokens.
func randomRequests(vocab, n, prefixLen, inputLen, outputLen int, seed uint64) []offlineRequest {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	tok := func() int32 { return int32(3 + rng.IntN(max(vocab-3, 1))) }
	prefix := make([]int32, prefixLen)
	for i := range prefix {
		prefix[i] = tok()
	}
	reqs := make([]offlineRequest, n)
	for i := range reqs {
		p := slices.Clone(prefix)
		for range max(inputLen, 1) {
			p = append(p, tok())
		}
		reqs[i] = offlineRequest{prompt: p, maxTokens: outputLen}
	}
	return reqs
}

// shareGPTRequests takes the first human turn of the first n conversations as prompts; the
// output length is the reply's token count when the file has one.
func shareGPTRequests(e *kvasir.Engine, path string, n, outputLen int) ([]offlineRequest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var convs []struct {
		Conversations []struct {
			From  string `json:"from"`
			Value string `json:"value"`
		} `json:"conversations"`
	}
	if err := json.Unmarshal(data, &convs); err != nil {
		return nil, fmt.Errorf("dataset %s: %w", path, err)
	}
	var reqs []offlineRequest
	for _, c := range convs {
		if len(reqs) == n {
			break
		}
		if len(c.Conversations) == 0 {
			continue
		}
		p, err := e.Tokenize(c.Conversations[0].Value, true)
		if err != nil {
			return nil, err
		}
		out := outputLen
		if len(c.Conversations) > 1 {
			if r, err := e.Tokenize(c.Conversations[1].Value, false); err == nil && len(r) > 0 {
				out = len(r)
			}
		}
		if len(p)+out > e.MaxModelLen() || len(p) == 0 {
			continue
		}
		reqs = append(reqs, offlineRequest{prompt: p, maxTokens: out})
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("dataset %s: no usable conversation", path)
	}
	return reqs, nil
}

// runOffline pushes the requests through the engine, at most concurrency at a time.
func runOffline(e *kvasir.Engine, reqs []offlineRequest, concurrency int, params kvasir.SamplingParams) offlineResult {
	if concurrency <= 0 || concurrency > len(reqs) {
		concurrency = len(reqs)
	}
	before := e.Stats()
	timings := make([]offlineTiming, len(reqs))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i, r := range reqs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			timings[i] = runOne(e, r, params)
		}()
	}
	wg.Wait()
	dur := time.Since(start)
	after := e.Stats()

	res := offlineResult{Duration: dur.Seconds(), MaxConcurrency: concurrency}
	var ttft, tpot, itl, e2e []float64
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	for _, t := range timings {
		res.InputLens = append(res.InputLens, t.input)
		res.OutputLens = append(res.OutputLens, t.output)
		res.TTFTs = append(res.TTFTs, t.ttft.Seconds())
		if t.err != nil {
			res.Failed++
			continue
		}
		res.Completed++
		res.TotalInputTokens += t.input
		res.TotalOutputTokens += t.output
		ttft = append(ttft, ms(t.ttft))
		e2e = append(e2e, ms(t.e2e))
		if t.output > 1 {
			tpot = append(tpot, ms(t.e2e-t.ttft)/float64(t.output-1))
		}
		for _, d := range t.itl {
			itl = append(itl, ms(d))
		}
	}
	res.RequestThroughput = float64(res.Completed) / dur.Seconds()
	res.OutputThroughput = float64(res.TotalOutputTokens) / dur.Seconds()
	res.TotalTokenThroughput = float64(res.TotalInputTokens+res.TotalOutputTokens) / dur.Seconds()
	res.MeanTTFTms, res.MedianTTFTms, res.StdTTFTms, res.P99TTFTms = summarize(ttft)
	res.MeanTPOTms, res.MedianTPOTms, res.StdTPOTms, res.P99TPOTms = summarize(tpot)
	res.MeanITLms, res.MedianITLms, res.StdITLms, res.P99ITLms = summarize(itl)
	res.MeanE2ELms, res.MedianE2ELms, res.StdE2ELms, res.P99E2ELms = summarize(e2e)
	if q := after.PrefixQueries - before.PrefixQueries; q > 0 {
		res.PrefixCacheHitRate = float64(after.PrefixHits-before.PrefixHits) / float64(q)
	}
	res.NumPreemptions = after.Preemptions - before.Preemptions
	return res
}

// runOne sends one request and times its outputs.
func runOne(e *kvasir.Engine, r offlineRequest, params kvasir.SamplingParams) offlineTiming {
	t := offlineTiming{input: len(r.prompt)}
	start := time.Now()
	params.MaxTokens = r.maxTokens
	ch, err := e.Generate(context.Background(), kvasir.Request{PromptTokens: r.prompt, Params: params})
	if err != nil {
		t.err = err
		return t
	}
	last := start
	for o := range ch {
		now := time.Now()
		if len(o.TokenIDs) > 0 {
			if t.output == 0 {
				t.ttft = now.Sub(start)
			} else {
				t.itl = append(t.itl, now.Sub(last))
			}
			last = now
			t.output += len(o.TokenIDs)
		}
		if o.Err != nil {
			t.err = o.Err
		}
	}
	t.e2e = time.Since(start)
	return t
}

// summarize returns the mean, median, standard deviation and 99th percentile of xs.
func summarize(xs []float64) (mean, median, std, p99 float64) {
	if len(xs) == 0 {
		return 0, 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	for _, x := range s {
		mean += x
	}
	mean /= float64(len(s))
	for _, x := range s {
		std += (x - mean) * (x - mean)
	}
	std = math.Sqrt(std / float64(len(s)))
	return mean, quantile(s, 0.5), std, quantile(s, 0.99)
}

// quantile interpolates linearly between the sorted values (numpy's default).
func quantile(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}

func printOffline(r offlineResult) {
	fmt.Printf("============ Offline Benchmark Result ============\n")
	fmt.Printf("%-40s %10d\n", "Successful requests:", r.Completed)
	fmt.Printf("%-40s %10d\n", "Failed requests:", r.Failed)
	fmt.Printf("%-40s %10d\n", "Maximum request concurrency:", r.MaxConcurrency)
	fmt.Printf("%-40s %10.2f\n", "Benchmark duration (s):", r.Duration)
	fmt.Printf("%-40s %10d\n", "Total input tokens:", r.TotalInputTokens)
	fmt.Printf("%-40s %10d\n", "Total generated tokens:", r.TotalOutputTokens)
	fmt.Printf("%-40s %10.2f\n", "Request throughput (req/s):", r.RequestThroughput)
	fmt.Printf("%-40s %10.2f\n", "Output token throughput (tok/s):", r.OutputThroughput)
	fmt.Printf("%-40s %10.2f\n", "Total token throughput (tok/s):", r.TotalTokenThroughput)
	fmt.Printf("%-40s %10.2f\n", "Prefix cache hit rate (%):", 100*r.PrefixCacheHitRate)
	fmt.Printf("%-40s %10d\n", "Preemptions:", r.NumPreemptions)
	for _, m := range []struct {
		name                   string
		mean, median, std, p99 float64
	}{
		{"Time to First Token", r.MeanTTFTms, r.MedianTTFTms, r.StdTTFTms, r.P99TTFTms},
		{"Time per Output Token (excl. 1st token)", r.MeanTPOTms, r.MedianTPOTms, r.StdTPOTms, r.P99TPOTms},
		{"Inter-token Latency", r.MeanITLms, r.MedianITLms, r.StdITLms, r.P99ITLms},
		{"End-to-end Latency", r.MeanE2ELms, r.MedianE2ELms, r.StdE2ELms, r.P99E2ELms},
	} {
		fmt.Printf("%s\n", centerTitle(m.name))
		fmt.Printf("%-40s %10.2f\n%-40s %10.2f\n%-40s %10.2f\n", "Mean (ms):", m.mean, "Median (ms):", m.median, "P99 (ms):", m.p99)
	}
	fmt.Println(strings.Repeat("=", 50))
}

func centerTitle(s string) string {
	pad := max(0, 50-len(s)-2)
	return strings.Repeat("-", pad/2) + " " + s + " " + strings.Repeat("-", pad-pad/2)
}
