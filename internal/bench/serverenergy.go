package bench

import (
	"io"
	"sort"
)

// ServerEnergy is the energy a kvasir server's counters measured over a `bench serve` run
// (the difference of two scrapes of kvasir:energy_joules_total, summed over its sources),
// per output token the run received.
type ServerEnergy struct {
	Sources        []string
	Joules         float64
	Watts          float64 // average over the run's duration
	JoulesPerToken float64
}

// ParseEnergyCounters reads kvasir:energy_joules_total's series of a Prometheus text
// exposition, by source.
func ParseEnergyCounters(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	err := scanSamples(r, func(name, labels []byte, v float64) {
		if string(name) != "kvasir:energy_joules_total" {
			return
		}
		if src, ok := labelValue(labels, "source"); ok {
			out[src] += v
		}
	})
	return out, err
}

// ServerEnergyDelta returns the energy between two scrapes over a run of seconds that
// received tokens output tokens, or nil when the server exports no energy counter (or a
// source is missing from one scrape: it restarted).
func ServerEnergyDelta(before, after map[string]float64, seconds float64, tokens int) *ServerEnergy {
	if len(after) == 0 || len(before) != len(after) {
		return nil
	}
	e := &ServerEnergy{}
	for src, a := range after {
		b, ok := before[src]
		if !ok || a < b {
			return nil
		}
		e.Joules += a - b
		e.Sources = append(e.Sources, src)
	}
	sort.Strings(e.Sources)
	if seconds > 0 {
		e.Watts = e.Joules / seconds
	}
	if tokens > 0 {
		e.JoulesPerToken = e.Joules / float64(tokens)
	}
	return e
}
