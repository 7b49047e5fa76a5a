package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvasir-llm/kvasir"
)

// AddKVPool registers the metrics of an engine's shared KV pool and host offload tier
// (kvasir:kv_pool_*, kvasir:kv_offload_*), read from stats at scrape time. An engine with
// neither registers nothing.
func (m *Metrics) AddKVPool(eng *kvasir.Engine) error {
	if _, ok := eng.KVPoolStats(); !ok {
		return nil
	}
	c := &kvPoolCollector{stats: func() kvasir.KVPoolStats { s, _ := eng.KVPoolStats(); return s }}
	for _, d := range kvPoolMetrics {
		c.descs = append(c.descs, prometheus.NewDesc(MetricPrefix+d.name, d.help, nil, m.labels))
	}
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// kvPoolMetrics are the pool's metrics: name, help, type and the value in a Stats.
var kvPoolMetrics = []struct {
	name, help string
	kind       prometheus.ValueType
	value      func(kvasir.KVPoolStats) float64
}{
	{"kv_pool_hits_total", "KV blocks found in the shared pool (Redis) on admission and imported instead of computed.", prometheus.CounterValue,
		func(s kvasir.KVPoolStats) float64 { return float64(s.Hits) }},
	{"kv_pool_misses_total", "KV blocks looked up in the shared pool and not found (a lookup stops at the first miss; the rest count too).", prometheus.CounterValue,
		func(s kvasir.KVPoolStats) float64 { return float64(s.Misses) }},
	{"kv_pool_read_bytes_total", "Bytes of KV block values read from the shared pool.", prometheus.CounterValue,
		func(s kvasir.KVPoolStats) float64 { return float64(s.ReadBytes) }},
	{"kv_pool_written_bytes_total", "Bytes of KV block values written to the shared pool.", prometheus.CounterValue,
		func(s kvasir.KVPoolStats) float64 { return float64(s.WrittenBytes) }},
	{"kv_pool_errors_total", "Failed or timed-out calls to the shared pool's Redis, and calls refused while its circuit breaker is open.", prometheus.CounterValue,
		func(s kvasir.KVPoolStats) float64 { return float64(s.Errors) }},
	{"kv_pool_corrupt_total", "KV block values from the shared pool that failed their checksum or key checks (recomputed).", prometheus.CounterValue,
		func(s kvasir.KVPoolStats) float64 { return float64(s.Corrupt) }},
	{"kv_pool_dropped_writes_total", "KV blocks not written to the shared pool: write queue full or Redis down.", prometheus.CounterValue,
		func(s kvasir.KVPoolStats) float64 { return float64(s.DroppedWrites) }},
	{"kv_pool_up", "1 while the shared pool's Redis is being called (circuit breaker closed), 0 while it is bypassed or absent.", prometheus.GaugeValue,
		func(s kvasir.KVPoolStats) float64 {
			if s.Up {
				return 1
			}
			return 0
		}},
	{"kv_offload_hits_total", "KV blocks found in the host-memory offload tier on admission.", prometheus.CounterValue,
		func(s kvasir.KVPoolStats) float64 { return float64(s.OffloadHits) }},
	{"kv_offload_misses_total", "KV blocks looked up in the host-memory offload tier and not found.", prometheus.CounterValue,
		func(s kvasir.KVPoolStats) float64 { return float64(s.OffloadMisses) }},
	{"kv_offload_blocks", "KV blocks held in the host-memory offload tier.", prometheus.GaugeValue,
		func(s kvasir.KVPoolStats) float64 { return float64(s.OffloadBlocks) }},
	{"kv_offload_bytes", "Bytes of KV blocks held in the host-memory offload tier.", prometheus.GaugeValue,
		func(s kvasir.KVPoolStats) float64 { return float64(s.OffloadBytes) }},
}

// kvPoolCollector reads the pool's stats at scrape time.
type kvPoolCollector struct {
	stats func() kvasir.KVPoolStats
	descs []*prometheus.Desc
}

func (c *kvPoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *kvPoolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for i, d := range kvPoolMetrics {
		ch <- prometheus.MustNewConstMetric(c.descs[i], d.kind, d.value(s))
	}
}
