package router

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricPrefix starts the router's metric names, as kvasir: starts an instance's.
const metricPrefix = "kvasir:router_"

// metrics are the router's Prometheus metrics.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec // backend, code
	retries   *prometheus.CounterVec // backend: attempts that failed before the first byte
	failovers *prometheus.CounterVec // backend: streams lost mid-way, then continued elsewhere
	decisions *prometheus.CounterVec // reason
	noBackend prometheus.Counter
	prefills  *prometheus.CounterVec // backend (the prefill instance), outcome
}

func newMetrics(backends []*backend) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "requests_total",
			Help: "Requests answered through each backend, by HTTP status."}, []string{"backend", "code"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "retries_total",
			Help: "Attempts on a backend that failed before the first byte and were retried on another."}, []string{"backend"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "failovers_total",
			Help: "Streams that lost this backend mid-way and were continued on another."}, []string{"backend"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "routing_decisions_total",
			Help: "Routing decisions, by reason (cache_hit, session, least_load, imbalance, round_robin, random)."}, []string{"reason"}),
		noBackend: prometheus.NewCounter(prometheus.CounterOpts{Name: metricPrefix + "no_backend_total",
			Help: "Requests refused because no healthy backend was left to try."}),
	}
	m.prefills = prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricPrefix + "prefills_total",
		Help: "Disaggregated prefills by prefill instance and outcome: ok (the KV reached the decode instance), failed or skipped (the decode instance computed the prompt)."}, []string{"backend", "outcome"})
	reg.MustRegister(m.requests, m.retries, m.failovers, m.decisions, m.noBackend, m.prefills,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, b := range backends {
		labels := prometheus.Labels{"backend": b.name}
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricPrefix + "backend_up", ConstLabels: labels,
				Help: "1 while the backend passes its health checks."}, func() float64 {
				if b.healthy.Load() {
					return 1
				}
				return 0
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricPrefix + "backend_requests_in_flight", ConstLabels: labels,
				Help: "Requests the router has in flight on the backend."}, func() float64 { return float64(b.inflight.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricPrefix + "backend_cached_blocks", ConstLabels: labels,
				Help: "Prefix-cache blocks the router believes the backend holds (events plus routed prompts not yet confirmed)."}, func() float64 {
				b.mu.Lock()
				defer b.mu.Unlock()
				return float64(b.cache.size())
			}),
		)
	}
	return m
}

// handler serves the registry in Prometheus' text format.
func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }
