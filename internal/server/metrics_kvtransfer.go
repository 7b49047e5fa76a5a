package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// transferMetrics count the KV transfers of prefill/decode disaggregation; registered only
// on an instance of role prefill or decode.
type transferMetrics struct {
	transfers, bytes, imports *prometheus.CounterVec
}

// attachTransfer registers the transfer metrics (once).
func (m *Metrics) attachTransfer() error {
	if m.transfer != nil {
		return nil
	}
	t := &transferMetrics{
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "kv_transfers_total", ConstLabels: m.labels,
			Help: "KV transfers by direction (sent, received) and outcome (ok, failed)."}, []string{"direction", "outcome"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "kv_transfer_bytes_total", ConstLabels: m.labels,
			Help: "Block bytes of the KV transfers that succeeded, by direction."}, []string{"direction"}),
		imports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPrefix + "kv_transfer_requests_total", ConstLabels: m.labels,
			Help: "Generation requests naming a KV transfer, by result: imported, missing (failed, expired or never sent: the prompt was computed), refused."}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{t.transfers, t.bytes, t.imports} {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	m.transfer = t
	return nil
}

// observeTransfer counts one transfer in direction ("sent", "received") that failed with err
// or moved n bytes.
func (m *Metrics) observeTransfer(direction string, err error, n int64) {
	if m.transfer == nil {
		return
	}
	if err != nil {
		m.transfer.transfers.WithLabelValues(direction, "failed").Inc()
		return
	}
	m.transfer.transfers.WithLabelValues(direction, "ok").Inc()
	m.transfer.bytes.WithLabelValues(direction).Add(float64(n))
}

// observeImport counts a generation request naming a transfer, by result.
func (m *Metrics) observeImport(result string) {
	if m.transfer != nil {
		m.transfer.imports.WithLabelValues(result).Inc()
	}
}
