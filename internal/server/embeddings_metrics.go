package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvasir-llm/kvasir"
)

// embedCollector reads an Embedder's counters at scrape time.
type embedCollector struct {
	emb                             *kvasir.Embedder
	calls, inputs, tokens, forwards *prometheus.Desc
}

// attachEmbedder registers the counters of the server's embedder.
func (m *Metrics) attachEmbedder(emb *kvasir.Embedder) error {
	labels := prometheus.Labels{"model_name": m.model}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(MetricPrefix+name, help, nil, labels)
	}
	c := &embedCollector{emb: emb,
		calls:    desc("embedding_requests_total", "Embedding, rerank and score requests run by the encoder."),
		inputs:   desc("embedding_inputs_total", "Sequences (texts, token lists, pairs) run by the encoder."),
		tokens:   desc("embedding_prompt_tokens_total", "Tokens run by the encoder."),
		forwards: desc("embedding_forwards_total", "Batched encoder forwards (several requests share one when they arrive together)."),
	}
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

func (c *embedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.inputs, c.tokens, c.forwards} {
		ch <- d
	}
}

func (c *embedCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.emb.Stats()
	for _, v := range []struct {
		d *prometheus.Desc
		n int64
	}{{c.calls, s.Calls}, {c.inputs, s.Inputs}, {c.tokens, s.Tokens}, {c.forwards, s.Forwards}} {
		ch <- prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(v.n))
	}
}
