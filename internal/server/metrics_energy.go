package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvasir-llm/kvasir/internal/energy"
)

// AddEnergy registers kvasir:energy_joules_total, the joules each of meter's counters
// (source: "rapl package-0", "nvml GPU 0", ...) measured since the meter opened, read at
// scrape time. A meter without counters registers nothing: energy is not measurable here.
func (m *Metrics) AddEnergy(meter *energy.Meter) error {
	if !meter.Available() {
		return nil
	}
	c := &energyCollector{counters: meter.Counters(), desc: prometheus.NewDesc(MetricPrefix+"energy_joules_total",
		"Energy measured by the machine's counters (RAPL packages, NVML GPUs) since the server started, in joules.",
		[]string{"source"}, prometheus.Labels{"model_name": m.model})}
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// energyCollector reads energy counters at scrape time.
type energyCollector struct {
	counters []energy.Counter
	desc     *prometheus.Desc
}

func (c *energyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect reports each counter that reads; one that fails is left out of the scrape.
func (c *energyCollector) Collect(ch chan<- prometheus.Metric) {
	for _, e := range c.counters {
		if j, err := e.Joules(); err == nil {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, j, e.Name())
		}
	}
}
