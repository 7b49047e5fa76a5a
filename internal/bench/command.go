package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ServeOptions is everything `kvasir bench serve` is asked, flag by flag (vLLM's names).
type ServeOptions struct {
	BaseURL  string // --base-url
	Endpoint string // --endpoint: /v1/completions or /v1/chat/completions
	Model    string // --model; empty: the first of GET /v1/models
	APIKey   string // --api-key or OPENAI_API_KEY
	Label    string // --label

	Dataset DatasetConfig

	RequestRate    float64 // --request-rate; +Inf for all at once
	Burstiness     float64 // --burstiness
	MaxConcurrency int     // --max-concurrency; 0 for no cap
	IgnoreEOS      bool    // --ignore-eos (always on for the random dataset, as vLLM)
	Timeout        time.Duration

	PercentileMetrics []string  // --percentile-metrics
	Percentiles       []float64 // --metric-percentiles
	Goodput           Goodput   // --goodput

	// Tokenizer is the local tokenizer of --tokenizer, TokenizerID its name; nil without.
	Tokenizer   Tokenizer
	TokenizerID string

	SaveResult     bool   // --save-result
	ResultDir      string // --result-dir
	ResultFilename string // --result-filename
	PlotPath       string // --plot: a PNG of the latency distributions and throughput

	DisableProgress bool // --disable-tqdm
	// Out receives the report; Err the progress bar and notes.
	Out, Err io.Writer
}

// Serve runs the serving benchmark end to end: it finds the model, makes the workload,
// sends it, prints vLLM's summary and, as asked, saves the JSON result and the plot.
func Serve(ctx context.Context, o ServeOptions) (*Result, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Err == nil {
		o.Err = io.Discard
	}
	if o.Endpoint == "" {
		o.Endpoint = "/v1/completions"
	}
	if !strings.HasPrefix(o.Endpoint, "/") {
		o.Endpoint = "/" + o.Endpoint
	}
	if !strings.HasSuffix(o.Endpoint, "/completions") {
		return nil, fmt.Errorf("--endpoint %s: want /v1/completions or /v1/chat/completions", o.Endpoint)
	}
	if o.MaxConcurrency < 0 {
		return nil, fmt.Errorf("--max-concurrency %d: need a positive cap (0 for none)", o.MaxConcurrency)
	}
	if o.RequestRate == 0 {
		o.RequestRate = math.Inf(1)
	}
	if o.Burstiness == 0 {
		o.Burstiness = 1
	}
	if len(o.PercentileMetrics) == 0 {
		o.PercentileMetrics = []string{"ttft", "tpot", "itl"}
	}
	if len(o.Percentiles) == 0 {
		o.Percentiles = []float64{99}
	}
	if o.Dataset.Name == DatasetRandom {
		// As vLLM: random prompts run to their full output length.
		o.IgnoreEOS = true
	}
	httpc := NewHTTPClient()
	defer httpc.CloseIdleConnections()
	if o.Model == "" {
		fmt.Fprintln(o.Out, "Model not specified, fetching first model from server...")
		m, err := FirstModel(ctx, httpc, o.BaseURL, o.APIKey)
		if err != nil {
			return nil, err
		}
		o.Model = m
		fmt.Fprintf(o.Out, "First model name: %s\n", m)
	}
	client := &Client{HTTP: httpc, BaseURL: o.BaseURL, Endpoint: o.Endpoint, Model: o.Model, APIKey: o.APIKey,
		IgnoreEOS: o.IgnoreEOS, Timeout: o.Timeout, Tok: o.Tokenizer}

	var srv *ServerTokenizer
	if o.Tokenizer == nil {
		srv = ProbeServerTokenizer(ctx, httpc, o.BaseURL, o.Model, o.APIKey)
	}
	pb, err := NewPromptBuilder(ctx, o.Tokenizer, srv, client.Chat())
	if err != nil {
		return nil, err
	}
	switch {
	case o.Tokenizer != nil:
		fmt.Fprintf(o.Err, "prompts: made with the local tokenizer %s\n", o.TokenizerID)
	case srv != nil && pb.Exact():
		fmt.Fprintln(o.Err, "prompts: token ids from the server's /tokenize")
	case srv != nil:
		fmt.Fprintln(o.Err, "prompts: text from the server's /tokenize and /detokenize (lengths approximate)")
	default:
		fmt.Fprintln(o.Err, "prompts: no tokenizer (pass --tokenizer) and no /tokenize on the server: common words, lengths approximate; token counts come from the server's usage")
	}
	reqs, err := LoadDataset(ctx, o.Dataset, pb)
	if err != nil {
		return nil, err
	}

	timed := o.Dataset.Timed()
	if timed {
		fmt.Fprintln(o.Out, "Replaying the trace at its timestamps.")
	} else {
		fmt.Fprintf(o.Out, "Traffic request rate: %s\n", rateString(o.RequestRate))
		dist := "Gamma distribution"
		if o.Burstiness == 1 {
			dist = "Poisson process"
		}
		fmt.Fprintf(o.Out, "Burstiness factor: %g (%s)\n", o.Burstiness, dist)
	}
	if o.MaxConcurrency > 0 {
		fmt.Fprintf(o.Out, "Maximum request concurrency: %d\n", o.MaxConcurrency)
	} else {
		fmt.Fprintln(o.Out, "Maximum request concurrency: None")
	}
	cfg := Config{Client: client, RequestRate: o.RequestRate, Burstiness: o.Burstiness, MaxConcurrency: o.MaxConcurrency,
		Timed: timed, Seed: o.Dataset.Seed, Percentiles: o.Percentiles, Goodput: o.Goodput}
	if !o.DisableProgress {
		cfg.Progress = o.Err
	}
	// The server's own histograms and spec_decode counters, when it exports kvasir's or
	// vLLM's, and its energy counters, when it exports kvasir's, are compared after.
	before, scrapeErr := ScrapeServer(ctx, httpc, o.BaseURL, o.APIKey)
	res, err := Run(ctx, cfg, reqs)
	if err != nil {
		return nil, err
	}
	if scrapeErr == nil {
		if after, err := ScrapeServer(ctx, httpc, o.BaseURL, o.APIKey); err == nil {
			res.Server = ServerLatencyDelta(before.Histograms, after.Histograms)
			res.SpecDecode = SpecDecodeDelta(before.Spec, after.Spec)
			res.Energy = ServerEnergyDelta(before.Energy, after.Energy, res.Duration.Seconds(), res.Metrics.TotalOutput)
		}
	}
	backend := "openai"
	if client.Chat() {
		backend = "openai-chat"
	}
	rep := Report{Backend: backend, Label: o.Label, ModelID: o.Model, TokenizerID: o.TokenizerID, NumPrompts: len(reqs),
		RequestRate: o.RequestRate, Burstiness: o.Burstiness, MaxConcurrency: o.MaxConcurrency, Timed: timed,
		PercentileMetrics: o.PercentileMetrics, Percentiles: o.Percentiles, Goodput: o.Goodput}
	WriteSummary(o.Out, rep, res)
	if res.Interrupted {
		fmt.Fprintln(o.Err, "the run was interrupted: the figures cover the requests that finished")
	}

	now := time.Now()
	if o.SaveResult || o.ResultFilename != "" {
		name := o.ResultFilename
		if name == "" {
			name = ResultFilename(rep, now)
		}
		if o.ResultDir != "" {
			if err := os.MkdirAll(o.ResultDir, 0o755); err != nil {
				return res, fmt.Errorf("--result-dir: %w", err)
			}
			name = filepath.Join(o.ResultDir, name)
		}
		data, err := ResultJSON(rep, res, now)
		if err != nil {
			return res, err
		}
		if err := os.WriteFile(name, append(data, '\n'), 0o644); err != nil {
			return res, fmt.Errorf("saving the result: %w", err)
		}
		fmt.Fprintf(o.Err, "result saved to %s\n", name)
	}
	if o.PlotPath != "" {
		f, err := os.Create(o.PlotPath)
		if err != nil {
			return res, fmt.Errorf("--plot: %w", err)
		}
		title := fmt.Sprintf("%s on %s: %d requests, %s, rate %s", o.Model, o.Endpoint, len(reqs), o.Dataset.Name, rateString(o.RequestRate))
		if timed {
			title = fmt.Sprintf("%s on %s: %d requests, %s trace replay", o.Model, o.Endpoint, len(reqs), o.Dataset.Name)
		}
		err = WritePlot(f, title, res)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return res, fmt.Errorf("--plot %s: %w", o.PlotPath, err)
		}
		fmt.Fprintf(o.Err, "plot saved to %s\n", o.PlotPath)
	}
	return res, nil
}

func rateString(r float64) string {
	if math.IsInf(r, 1) {
		return "inf"
	}
	return PercentileName(r)
}
