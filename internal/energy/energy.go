// Package energy measures the energy a run takes, from the machine's own counters: the
// CPU packages' RAPL counters (/sys/class/powercap/intel-rapl:N/energy_uj, microjoules,
// wrapping at max_energy_range_uj; Linux names AMD's the same) and the NVIDIA GPUs' total
// energy counters through NVML (nvmlDeviceGetTotalEnergyConsumption: millijoules since the
// driver loaded, 64 bits). A Meter reads them at the start and end of a span; a background
// poll keeps a RAPL counter that wraps more than once within a span from being miscounted.
// Where none is readable (no RAPL, energy_uj root-only as since Linux 5.10, no NVIDIA
// driver) the Report says "not available" and why.
package energy

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Counter is one energy counter: cumulative joules since it was opened, never decreasing.
type Counter interface {
	// Name says what the counter measures, such as "rapl package-0" or "nvml GPU 0".
	Name() string
	// Joules reads the counter.
	Joules() (float64, error)
}

// PollInterval is how often a Meter reads its counters between spans' ends, so that a
// RAPL counter (which can wrap within minutes at high power) is seen at least once a wrap.
const PollInterval = 10 * time.Second

// Meter reads a set of counters.
type Meter struct {
	counters []Counter
	// unavailable says why there are no counters.
	unavailable string

	stop chan struct{}
	done chan struct{}
}

// Open finds the machine's counters: RAPL's package domains and NVML's GPUs. A Meter
// without counters is still usable: its reports say why energy is not available.
func Open() *Meter {
	var counters []Counter
	var why []string
	rapl, err := RAPL(DefaultRAPLRoot)
	counters = append(counters, rapl...)
	if err != nil {
		why = append(why, err.Error())
	}
	gpus, err := NVML()
	counters = append(counters, gpus...)
	if err != nil {
		why = append(why, err.Error())
	}
	return NewMeter(counters, strings.Join(why, "; "))
}

// NewMeter makes a meter of the given counters; unavailable says why there are none (or
// why some sources are missing), for the reports.
func NewMeter(counters []Counter, unavailable string) *Meter {
	m := &Meter{counters: counters, unavailable: unavailable}
	if len(counters) > 0 {
		m.stop, m.done = make(chan struct{}), make(chan struct{})
		go m.poll()
	}
	return m
}

// poll reads the counters every PollInterval until Close.
func (m *Meter) poll() {
	defer close(m.done)
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			for _, c := range m.counters {
				c.Joules()
			}
		}
	}
}

// Close stops the background poll.
func (m *Meter) Close() {
	if m.stop != nil {
		close(m.stop)
		<-m.done
		m.stop = nil
	}
}

// Available reports whether the meter has a counter.
func (m *Meter) Available() bool { return len(m.counters) > 0 }

// Unavailable says why the meter has no counter, or why some sources are missing.
func (m *Meter) Unavailable() string { return m.unavailable }

// Counters returns the meter's counters.
func (m *Meter) Counters() []Counter { return m.counters }

// Span is a measurement begun by Start.
type Span struct {
	m     *Meter
	start time.Time
	at    []float64 // each counter's joules at the start
	err   error
}

// Start begins a span.
func (m *Meter) Start() Span {
	s := Span{m: m, start: time.Now(), at: make([]float64, len(m.counters))}
	for i, c := range m.counters {
		j, err := c.Joules()
		if err != nil {
			s.err = errors.Join(s.err, fmt.Errorf("%s: %w", c.Name(), err))
		}
		s.at[i] = j
	}
	return s
}

// Report is the energy of a span.
type Report struct {
	Available bool `json:"available"`
	// Reason says why energy is not available.
	Reason string `json:"reason,omitempty"`
	// Sources names the counters summed, and PerSource holds each one's joules.
	Sources   []string           `json:"sources,omitempty"`
	PerSource map[string]float64 `json:"per_source_joules,omitempty"`
	Joules    float64            `json:"joules"`
	Seconds   float64            `json:"seconds"`
	// Watts is the average power over the span.
	Watts float64 `json:"average_watts"`
	// OutputTokens and JoulesPerToken: the span's output tokens and the joules per token.
	OutputTokens   int     `json:"output_tokens"`
	JoulesPerToken float64 `json:"joules_per_output_token"`
}

// End ends the span, which produced tokens output tokens, and reports its energy.
func (s Span) End(tokens int) Report {
	r := Report{Seconds: time.Since(s.start).Seconds(), OutputTokens: tokens}
	if len(s.m.counters) == 0 {
		r.Reason = s.m.unavailable
		return r
	}
	err := s.err
	for i, c := range s.m.counters {
		j, e := c.Joules()
		if e != nil {
			err = errors.Join(err, fmt.Errorf("%s: %w", c.Name(), e))
		}
		if r.PerSource == nil {
			r.PerSource = map[string]float64{}
		}
		r.Joules += j - s.at[i]
		r.PerSource[c.Name()] = j - s.at[i]
		r.Sources = append(r.Sources, c.Name())
	}
	if err != nil {
		return Report{Seconds: r.Seconds, OutputTokens: tokens, Reason: err.Error()}
	}
	r.Available = true
	if r.Seconds > 0 {
		r.Watts = r.Joules / r.Seconds
	}
	if tokens > 0 {
		r.JoulesPerToken = r.Joules / float64(tokens)
	}
	return r
}

// String is the report as one line for a benchmark's output.
func (r Report) String() string {
	if !r.Available {
		return "energy: not available (" + r.Reason + ")"
	}
	parts := make([]string, len(r.Sources))
	for i, name := range r.Sources {
		parts[i] = fmt.Sprintf("%s %.1f J", name, r.PerSource[name])
	}
	return fmt.Sprintf("energy: %.1f J over %.2f s = %.1f W average, %.4f J per output token (%s)",
		r.Joules, r.Seconds, r.Watts, r.JoulesPerToken, strings.Join(parts, ", "))
}
