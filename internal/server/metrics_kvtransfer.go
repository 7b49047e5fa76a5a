package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvasir-llm/kvasir/internal/kvtransfer"
)

// transferMetrics count the KV transfers of prefill/decode disaggregation; registered only
// on an instance of role prefill or decode.
type transferMetrics struct {
	transfers, bytes, imports *prometheus.CounterVec
}

// EnableTransfer registers the KV transfer metrics of prefill/decode disaggregation (once;
// server.New does it for an instance of role prefill or decode, but a receiver started
// before the server counts from its start only when this was called first).
func (m *Metrics) EnableTransfer() error {
	if m.transfer.Load() != nil {
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
	m.transfer.Store(t)
	return nil
}

// attachReceiver registers the gauge of the bytes a decode instance's receiver holds for
// requests that have not taken them yet.
func (m *Metrics) attachReceiver(rc *kvtransfer.Receiver) error {
	return m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricPrefix + "kv_transfer_held_bytes", ConstLabels: m.labels,
		Help: "Block bytes of received KV transfers held for requests that have not taken them yet."},
		func() float64 { return float64(rc.Stats().HeldBytes) }))
}

// ObserveReceived counts a transfer received (err nil) or failed, of n block bytes: a
// kvtransfer.ReceiverConfig.OnDone.
func (m *Metrics) ObserveReceived(err error, n int64) { m.observeTransfer("received", err, n) }

// observeTransfer counts one transfer in direction ("sent", "received") that failed with err
// or moved n bytes.
func (m *Metrics) observeTransfer(direction string, err error, n int64) {
	t := m.transfer.Load()
	if t == nil {
		return
	}
	if err != nil {
		t.transfers.WithLabelValues(direction, "failed").Inc()
		return
	}
	t.transfers.WithLabelValues(direction, "ok").Inc()
	t.bytes.WithLabelValues(direction).Add(float64(n))
}

// observeImport counts a generation request naming a transfer, by result.
func (m *Metrics) observeImport(result string) {
	if t := m.transfer.Load(); t != nil {
		t.imports.WithLabelValues(result).Inc()
	}
}
