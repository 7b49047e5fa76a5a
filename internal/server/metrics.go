package server

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvasir-llm/kvasir"
)

// Histogram buckets, the same as vLLM's so that its dashboards and quantile queries fit.
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

func iterationBuckets() []float64 {
	return []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
}

func nBuckets() []float64 { return []float64{1, 2, 5, 10, 20} }

// tokenBuckets are 1, 2, 5, 10, 20, 50, ... up to max (vLLM's 1-2-5 buckets of the
// context length), for histograms of token counts.
func tokenBuckets(max int) []float64 {
	var b []float64
	for scale := 1; ; scale *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*scale > max {
				return b
			}
			b = append(b, float64(m*scale))
		}
	}
}

// MetricPrefix starts every kvasir metric name, as "vllm:" starts vLLM's.
const MetricPrefix = "kvasir:"

// engineIndex is the engine label's value: kvasir runs one engine per server, vLLM's
// engine 0.
const engineIndex = "0"

// Metrics holds a server's Prometheus registry: vLLM v1's metrics under "kvasir:", with
// its names, types, buckets and labels (model_name, engine). The histograms are fed by the
// engine's callbacks, OnRequestDone (per choice, as vLLM counts each child request of an
// n > 1 request) and OnStepDone (per step); gauges and counters are read from
// Engine.Stats at scrape time. Make it before the engine, hand both callbacks to
// kvasir.Options (Hook), then pass it in Config.Metrics.
type Metrics struct {
	model  string
	labels prometheus.Labels
	reg    *prometheus.Registry

	ttft, itl, tpot, e2e, queue, inference, prefill, decode prometheus.Observer
	iteration, paramsN                                      prometheus.Observer
	// tokens are the histograms of token counts, whose buckets depend on the context
	// length: made by attach (nil before).
	tokens atomic.Pointer[tokenHistograms]
	// transfer counts KV transfers (nil on an instance of role both).
	transfer atomic.Pointer[transferMetrics]
}

// tokenHistograms are the histograms of token counts per request.
type tokenHistograms struct {
	prompt, generation, maxGeneration, maxTokens prometheus.Observer
}

// NewMetrics makes the metrics of a server whose model is served as modelName (the
// model_name label).
func NewMetrics(modelName string) *Metrics {
	m := &Metrics{model: modelName, reg: prometheus.NewRegistry(),
		labels: prometheus.Labels{"model_name": modelName, "engine": engineIndex}}
	m.ttft = m.histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets())
	m.itl = m.histogram("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets())
	m.tpot = m.histogram("request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", itlBuckets())
	m.e2e = m.histogram("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", latencyBuckets())
	m.queue = m.histogram("request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", latencyBuckets())
	m.inference = m.histogram("request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", latencyBuckets())
	m.prefill = m.histogram("request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", latencyBuckets())
	m.decode = m.histogram("request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", latencyBuckets())
	m.iteration = m.histogram("iteration_tokens_total", "Histogram of number of tokens per engine_step.", iterationBuckets())
	m.paramsN = m.histogram("request_params_n", "Histogram of the n request parameter.", nBuckets())
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// histogram registers a histogram of the model's labels.
func (m *Metrics) histogram(name, help string, buckets []float64) prometheus.Observer {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: MetricPrefix + name, Help: help, Buckets: buckets, ConstLabels: m.labels,
	})
	m.reg.MustRegister(h)
	return h
}

// Hook sets opt's OnRequestDone and OnStepDone to the metrics' own.
func (m *Metrics) Hook(opt *kvasir.Options) {
	opt.OnRequestDone, opt.OnStepDone = m.OnRequestDone, m.OnStepDone
}

// OnStepDone records one engine step's tokens (iteration_tokens_total); it is the engine's
// Options.OnStepDone.
func (m *Metrics) OnStepDone(s kvasir.StepStats) {
	m.iteration.Observe(float64(s.PromptTokens + s.GenerationTokens))
}

// OnRequestDone records a finished request, each choice as vLLM records a finished child
// request; it is the engine's Options.OnRequestDone.
func (m *Metrics) OnRequestDone(s kvasir.RequestStats) {
	choices := s.Choices
	if choices == nil {
		// Beam search: its choices appear together, timed as the request.
		choices = []kvasir.ChoiceStats{{GenerationTokens: s.GenerationTokens, TTFT: s.TTFT, E2E: s.E2E, Decode: s.E2E - s.TTFT}}
	}
	th := m.tokens.Load()
	queue := max(s.QueueTime, 0)
	maxGen := 0
	for _, c := range choices {
		maxGen = max(maxGen, c.GenerationTokens)
		m.e2e.Observe(c.E2E.Seconds())
		m.queue.Observe(queue.Seconds())
		var prefill, decode, tpot float64
		if c.GenerationTokens > 0 {
			m.ttft.Observe(c.TTFT.Seconds())
			prefill, decode = max(c.TTFT-queue, 0).Seconds(), c.Decode.Seconds()
		}
		if c.GenerationTokens > 1 {
			tpot = decode / float64(c.GenerationTokens-1)
		}
		m.tpot.Observe(tpot)
		m.prefill.Observe(prefill)
		m.decode.Observe(decode)
		m.inference.Observe(prefill + decode)
		for _, d := range c.ITL {
			m.itl.Observe(d.Seconds())
		}
		if th != nil {
			th.prompt.Observe(float64(s.PromptTokens))
			th.generation.Observe(float64(c.GenerationTokens))
			th.maxTokens.Observe(float64(s.MaxTokens))
		}
	}
	m.paramsN.Observe(float64(max(s.N, 1)))
	if th != nil {
		th.maxGeneration.Observe(float64(maxGen))
	}
}

// Handler serves the registry in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// attach registers the collector of eng's gauges and counters, the histograms whose
// buckets follow its context length, and its cache configuration.
func (m *Metrics) attach(eng *kvasir.Engine) error {
	if m.tokens.Load() != nil {
		return fmt.Errorf("metrics: already attached to an engine")
	}
	b := tokenBuckets(eng.MaxModelLen())
	h := func(name, help string) prometheus.Observer { return m.histogram(name, help, b) }
	m.tokens.Store(&tokenHistograms{
		prompt:        h("request_prompt_tokens", "Number of prefill tokens processed."),
		generation:    h("request_generation_tokens", "Number of generation tokens processed."),
		maxGeneration: h("request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens."),
		maxTokens:     h("request_params_max_tokens", "Histogram of the max_tokens request parameter."),
	})
	cc := eng.CacheConfig()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricPrefix + "cache_config_info", Help: "Information of the LLMEngine CacheConfig",
		ConstLabels: prometheus.Labels{
			"engine": engineIndex, "block_size": strconv.Itoa(cc.BlockSize), "num_gpu_blocks": strconv.Itoa(cc.NumBlocks),
			"cache_dtype": cc.DType, "enable_prefix_caching": strconv.FormatBool(cc.PrefixCaching),
			"kv_cache_memory_bytes": strconv.FormatInt(cc.MemoryBytes, 10),
		},
	})
	info.Set(1)
	if err := m.reg.Register(info); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := m.reg.Register(newStatsCollector(m.labels, eng)); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if eng.LoRAEnabled() {
		if err := m.reg.Register(newLoRACollector(m.labels, eng)); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// statsCollector reads Engine.Stats at scrape time.
type statsCollector struct {
	eng *kvasir.Engine

	running, waiting, kvUsage               *prometheus.Desc
	preemptions, prefixQueries, prefixHits  *prometheus.Desc
	promptTokens, generationTokens, success *prometheus.Desc
	forcedTokens                            *prometheus.Desc

	// The speculative-decoding counters, only when the engine speculates (as vLLM
	// registers them only then): specK positions are reported.
	specK                                     int
	specDrafts, specDraftTokens, specAccepted *prometheus.Desc
	specAcceptedPerPos                        *prometheus.Desc
}

func newStatsCollector(labels prometheus.Labels, eng *kvasir.Engine) *statsCollector {
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(MetricPrefix+name, help, variable, labels)
	}
	c := &statsCollector{
		eng:              eng,
		running:          d("num_requests_running", "Number of requests in model execution batches."),
		waiting:          d("num_requests_waiting", "Number of requests waiting to be processed."),
		kvUsage:          d("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		preemptions:      d("num_preemptions_total", "Cumulative number of preemption from the engine."),
		prefixQueries:    d("prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		prefixHits:       d("prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		promptTokens:     d("prompt_tokens_total", "Number of prefill tokens processed."),
		generationTokens: d("generation_tokens_total", "Number of generation tokens processed."),
		success:          d("request_success_total", "Count of successfully processed requests.", "finished_reason"),
		forcedTokens:     d("structured_forced_tokens_total", "Tokens of structured output appended by jump-forward without sampling."),
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
		c.prefixHits, c.promptTokens, c.generationTokens, c.success, c.forcedTokens} {
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
	counter(c.forcedTokens, float64(s.ForcedTokens))
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
