package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/energy"
)

// fixedCounter is an energy counter that reads a set value.
type fixedCounter struct {
	name   string
	joules float64
}

func (c *fixedCounter) Name() string             { return c.name }
func (c *fixedCounter) Joules() (float64, error) { return c.joules, nil }

// TestEnergyMetric checks kvasir:energy_joules_total reports each counter's joules at
// scrape time, and that a meter without counters adds no metric.
func TestEnergyMetric(t *testing.T) {
	env := newTestEnv(t, kvasir.Options{}, Config{})
	gpu := &fixedCounter{"nvml GPU 0", 12.5}
	meter := energy.NewMeter([]energy.Counter{&fixedCounter{"rapl package-0", 3}, gpu}, "")
	defer meter.Close()
	if err := env.srv.Metrics().AddEnergy(meter); err != nil {
		t.Fatal(err)
	}
	gpu.joules = 20
	status, body := env.do(t, http.MethodGet, "/metrics", nil)
	text := string(body)
	for _, want := range []string{
		`kvasir:energy_joules_total{model_name="tiny",source="nvml GPU 0"} 20`,
		`kvasir:energy_joules_total{model_name="tiny",source="rapl package-0"} 3`,
		"# TYPE kvasir:energy_joules_total counter",
	} {
		if status != http.StatusOK || !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	other := newTestEnv(t, kvasir.Options{}, Config{})
	none := energy.NewMeter(nil, "no counters")
	if err := other.srv.Metrics().AddEnergy(none); err != nil {
		t.Fatal(err)
	}
	if _, body := other.do(t, http.MethodGet, "/metrics", nil); strings.Contains(string(body), "energy_joules_total") {
		t.Error("a meter without counters added the energy metric")
	}
}
