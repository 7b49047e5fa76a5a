package server

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvasir-llm/kvasir"
)

// Histogram buckets, the same as vLLM's so that existing dashboards and quantile queries fit.
func ttftBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
}

func itlBuckets() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
}

func latencyBuckets() []float64 {
	return []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
}

// MetricPrefix starts every kvasir metric name, as "vllm:" starts vLLM's.
const MetricPrefix = "kvasir:"

// Metrics holds a server's Prometheus registry: latency histograms fed by the engine's
// OnRequestDone callback, and gauges and counters read from Engine.Stats at scrape time.
// Make it before the engine, hand OnRequestDone to kvasir.Options, then pass it in
// Config.Metrics.
type Metrics struct {
	model string
	reg   *prometheus.Registry

	ttft, itl, e2e, queue prometheus.Observer
}

// NewMetrics makes the metrics of a server whose model is served as modelName (the
// model_name label).
func NewMetrics(modelName string) *Metrics {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": modelName}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: MetricPrefix + name, Help: help, Buckets: buckets, ConstLabels: labels,
		})
		reg.MustRegister(h)
		return h
	}
	m := &Metrics{model: modelName, reg: reg}
	m.ttft = hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets())
	m.itl = hist("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets())
	m.e2e = hist("e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.", latencyBuckets())
	m.queue = hist("request_queue_time_seconds", "Histogram of time spent waiting in the queue in seconds.", latencyBuckets())
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// OnRequestDone records a finished request's latencies; it is the engine's
// Options.OnRequestDone.
func (m *Metrics) OnRequestDone(s kvasir.RequestStats) {
	m.e2e.Observe(s.E2E.Seconds())
	if s.QueueTime > 0 {
		m.queue.Observe(s.QueueTime.Seconds())
	}
	if s.GenerationTokens > 0 && s.TTFT > 0 {
		m.ttft.Observe(s.TTFT.Seconds())
	}
	for _, d := range s.ITL {
		m.itl.Observe(d.Seconds())
	}
}

// Handler serves the registry in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// attach registers the collector of eng's gauges and counters.
func (m *Metrics) attach(eng *kvasir.Engine) error {
	if err := m.reg.Register(newStatsCollector(m.model, eng)); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// statsCollector reads Engine.Stats at scrape time.
type statsCollector struct {
	eng *kvasir.Engine

	running, waiting, kvUsage               *prometheus.Desc
	preemptions, prefixQueries, prefixHits  *prometheus.Desc
	promptTokens, generationTokens, success *prometheus.Desc

	// The speculative-decoding counters, only when the engine speculates (as vLLM
	// registers them only then): specK positions are reported.
	specK                                     int
	specDrafts, specDraftTokens, specAccepted *prometheus.Desc
	specAcceptedPerPos                        *prometheus.Desc
}

func newStatsCollector(model string, eng *kvasir.Engine) *statsCollector {
	labels := prometheus.Labels{"model_name": model}
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(MetricPrefix+name, help, variable, labels)
	}
	c := &statsCollector{
		eng:              eng,
		running:          d("num_requests_running", "Number of requests in model execution batches."),
		waiting:          d("num_requests_waiting", "Number of requests waiting to be processed."),
		kvUsage:          d("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		preemptions:      d("num_preemptions_total", "Cumulative number of preemptions."),
		prefixQueries:    d("prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		prefixHits:       d("prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		promptTokens:     d("prompt_tokens_total", "Number of prefill tokens processed."),
		generationTokens: d("generation_tokens_total", "Number of generation tokens processed."),
		success:          d("request_success_total", "Count of successfully processed requests (per choice).", "finished_reason"),
	}
	if sc := eng.Speculative(); sc != nil {
		c.specK = sc.NumSpeculativeTokens
		c.specDrafts = d("spec_decode_num_drafts_total", "Number of spec decoding drafts.")
		c.specDraftTokens = d("spec_decode_num_draft_tokens_total", "Number of draft tokens.")
		c.specAccepted = d("spec_decode_num_accepted_tokens_total", "Number of accepted tokens.")
		c.specAcceptedPerPos = d("spec_decode_num_accepted_tokens_per_pos_total", "Accepted tokens per draft position.", "position")
	}
	return c
}

// Describe sends the descriptors of the collected metrics.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.kvUsage, c.preemptions, c.prefixQueries,
		c.prefixHits, c.promptTokens, c.generationTokens, c.success} {
		ch <- d
	}
	if c.specK > 0 {
		for _, d := range []*prometheus.Desc{c.specDrafts, c.specDraftTokens, c.specAccepted, c.specAcceptedPerPos} {
			ch <- d
		}
	}
}

// Collect reads the engine's stats once and sends every metric.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.eng.Stats()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(c.running, float64(s.Running))
	gauge(c.waiting, float64(s.Waiting))
	gauge(c.kvUsage, s.KVUsage)
	counter(c.preemptions, float64(s.Preemptions))
	counter(c.prefixQueries, float64(s.PrefixQueries))
	counter(c.prefixHits, float64(s.PrefixHits))
	counter(c.promptTokens, float64(s.PromptTokens))
	counter(c.generationTokens, float64(s.GenerationTokens))
	reasons := []string{kvasir.FinishStop, kvasir.FinishLength, kvasir.FinishAbort}
	for r := range s.Finished {
		if r != kvasir.FinishStop && r != kvasir.FinishLength && r != kvasir.FinishAbort {
			reasons = append(reasons, r)
		}
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		counter(c.success, float64(s.Finished[r]), r)
	}
	if c.specK > 0 {
		counter(c.specDrafts, float64(s.SpecDrafts))
		counter(c.specDraftTokens, float64(s.DraftTokens))
		counter(c.specAccepted, float64(s.AcceptedDrafts))
		for pos := range min(c.specK, len(s.AcceptedPerPos)) {
			counter(c.specAcceptedPerPos, float64(s.AcceptedPerPos[pos]), strconv.Itoa(pos))
		}
	}
}
