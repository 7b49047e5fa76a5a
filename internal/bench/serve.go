// Package bench is kvasir's serving benchmark: it drives any OpenAI-compatible server
// (kvasir, vLLM, llama.cpp's server) with a workload (random tokens, ShareGPT, shared
// prefixes, a Mooncake trace) at a request rate, times every streamed chunk, and reports
// vLLM's `bench serve` figures: request and token throughput, TTFT, TPOT, ITL and E2EL
// statistics, goodput, and a vLLM-compatible JSON result.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Config is how a run sends its requests and what it reports.
type Config struct {
	Client *Client
	// RequestRate is the target requests per second; +Inf sends all at once.
	RequestRate float64
	// Burstiness is the gamma shape of the gaps between arrivals (1: Poisson).
	Burstiness float64
	// MaxConcurrency caps the requests in flight (0: no cap).
	MaxConcurrency int
	// Timed sends each request at its own Arrival (trace replay) instead of at the rate.
	Timed bool
	// Seed seeds the arrival times.
	Seed uint64
	// Percentiles are the metric percentiles to report, such as 99.
	Percentiles []float64
	// Goodput holds the objectives of the goodput figure; empty for none.
	Goodput Goodput
	// Progress, when not nil, receives a progress bar.
	Progress io.Writer
}

// Result is a finished run: its outputs and figures.
type Result struct {
	Outputs  []RequestOutput
	Duration time.Duration
	Metrics  Metrics
	// Interrupted is set when the context ended the run before every request finished.
	Interrupted bool
	// Server holds the server's own mean latencies over the run, when its /metrics has
	// kvasir's or vLLM's histograms; nil otherwise.
	Server *ServerLatency
	// SpecDecode holds speculative decoding's figures over the run, when the server's
	// /metrics has kvasir's or vLLM's spec_decode counters; nil otherwise.
	SpecDecode *SpecDecode
	// Energy is the energy the server measured over the run, when its /metrics has
	// kvasir:energy_joules_total; nil otherwise.
	Energy *ServerEnergy
}

// NewHTTPClient returns an HTTP client fit for benchmarking: enough idle connections for
// every concurrent request, and no transparent compression (which could hold chunks back).
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = 4096
	t.DisableCompression = true
	return &http.Client{Transport: t}
}

// FirstModel returns the id of the first model the server lists at GET /v1/models.
func FirstModel(ctx context.Context, client *http.Client, baseURL, apiKey string) (string, error) {
	url := strings.TrimRight(baseURL, "/") + "/v1/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w (is the server running?)", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, errorMessage(data))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("GET %s: the server lists no model", url)
	}
	return list.Data[0].ID, nil
}

// Run sends reqs as cfg says and measures them. Requests that fail are counted, never
// fatal; when ctx ends, requests not yet sent are recorded as failed and those in flight
// are cancelled.
func Run(ctx context.Context, cfg Config, reqs []SampleRequest) (*Result, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("bench: no client")
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("bench: no requests")
	}
	if cfg.MaxConcurrency < 0 {
		return nil, fmt.Errorf("bench: max concurrency %d: need >= 0", cfg.MaxConcurrency)
	}
	burst := cfg.Burstiness
	if burst == 0 {
		burst = 1
	}
	// order is the sending order; at[i] is when order[i] is sent.
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	var at []time.Duration
	if cfg.Timed {
		sort.SliceStable(order, func(a, b int) bool { return reqs[order[a]].Arrival < reqs[order[b]].Arrival })
		for _, i := range order {
			at = append(at, reqs[i].Arrival)
		}
	} else {
		rate := cfg.RequestRate
		if rate == 0 {
			rate = math.Inf(1)
		}
		var err error
		if at, err = Arrivals(len(reqs), rate, burst, rand.New(rand.NewPCG(cfg.Seed, 0x61727276))); err != nil {
			return nil, err
		}
	}

	var bar *progressbar.ProgressBar
	if cfg.Progress != nil {
		bar = progressbar.NewOptions(len(reqs),
			progressbar.OptionSetWriter(cfg.Progress),
			progressbar.OptionSetDescription("requests"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("req"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(cfg.Progress) }),
		)
	}
	outputs := make([]RequestOutput, len(reqs))
	var sem chan struct{}
	if cfg.MaxConcurrency > 0 {
		sem = make(chan struct{}, cfg.MaxConcurrency)
	}
	var wg sync.WaitGroup
	start := time.Now()
	sent := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
dispatch:
	for k, i := range order {
		if wait := at[k] - time.Since(start); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				break dispatch
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		sent = k + 1
		arrived := time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if sem != nil {
				select {
				case sem <- struct{}{}:
					defer func() { <-sem }()
				case <-ctx.Done():
					outputs[i] = RequestOutput{PromptLen: reqs[i].PromptLen, Error: "cancelled before it was sent: " + ctx.Err().Error(), Start: time.Since(start)}
					return
				}
			}
			queued := time.Since(arrived)
			o := cfg.Client.Send(ctx, reqs[i], start)
			o.QueueTime = queued
			outputs[i] = o
			if bar != nil {
				bar.Add(1)
			}
		}()
	}
	for _, i := range order[sent:] {
		outputs[i] = RequestOutput{PromptLen: reqs[i].PromptLen, Error: "not sent: the run was cancelled"}
	}
	wg.Wait()
	dur := time.Since(start)
	if bar != nil {
		bar.Finish()
	}
	return &Result{
		Outputs:     outputs,
		Duration:    dur,
		Metrics:     CalculateMetrics(outputs, dur, cfg.Percentiles, cfg.Goodput),
		Interrupted: ctx.Err() != nil,
	}, nil
}
