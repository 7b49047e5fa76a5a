package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// ServerLatency is the mean of the server's own Prometheus latency histograms over a run
// (kvasir's and vLLM's names: PREFIX:time_to_first_token_seconds,
// PREFIX:inter_token_latency_seconds (vLLM before 0.10: time_per_output_token_seconds),
// PREFIX:e2e_request_latency_seconds), to set beside the client's figures.
type ServerLatency struct {
	Prefix string // "kvasir" or "vllm"
	// Mean latencies in milliseconds; 0 where the histogram did not move.
	TTFT, ITL, E2EL float64
	// Requests is how many TTFT observations the run added.
	Requests float64
}

// histogramTotals maps a histogram's name to its summed _sum and _count over all labels.
type histogramTotals map[string][2]float64

// ParsePrometheusHistograms reads the _sum and _count series of a Prometheus text
// exposition, summed over label sets, by histogram name.
func ParsePrometheusHistograms(r io.Reader) (map[string][2]float64, error) {
	out := histogramTotals{}
	err := scanSamples(r, func(name, _ []byte, v float64) {
		n := string(name)
		switch {
		case strings.HasSuffix(n, "_sum"):
			t := out[strings.TrimSuffix(n, "_sum")]
			t[0] += v
			out[strings.TrimSuffix(n, "_sum")] = t
		case strings.HasSuffix(n, "_count"):
			t := out[strings.TrimSuffix(n, "_count")]
			t[1] += v
			out[strings.TrimSuffix(n, "_count")] = t
		}
	})
	return out, err
}

// scanSamples calls fn with the name, the label set's text (between the braces, nil
// without) and the value of every sample line of a Prometheus text exposition; comments and
// lines it cannot read are skipped.
func scanSamples(r io.Reader, fn func(name, labels []byte, v float64)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var name, labels, rest []byte
		if i := bytes.IndexAny(line, "{ \t"); i < 0 {
			continue
		} else if line[i] == '{' {
			// Label values may hold spaces and braces inside quotes.
			end, inQuote := -1, false
			for j := i + 1; j < len(line); j++ {
				switch c := line[j]; {
				case c == '\\' && inQuote:
					j++
				case c == '"':
					inQuote = !inQuote
				case c == '}' && !inQuote:
					end = j
				}
				if end >= 0 {
					break
				}
			}
			if end < 0 {
				continue
			}
			name, labels, rest = line[:i], line[i+1:end], line[end+1:]
		} else {
			name, rest = line[:i], line[i:]
		}
		fields := strings.Fields(string(rest))
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		fn(name, labels, v)
	}
	return sc.Err()
}

// labelValue returns the value of label key in a label set's text (`a="x",b="y"`), with
// its escapes (\\, \", \n) undone; false when the set has no such label or cannot be read.
func labelValue(labels []byte, key string) (string, bool) {
	for len(labels) > 0 {
		eq := bytes.IndexByte(labels, '=')
		if eq < 0 || eq+1 >= len(labels) || labels[eq+1] != '"' {
			return "", false
		}
		name := string(bytes.TrimSpace(labels[:eq]))
		var val []byte
		j := eq + 2
		for ; j < len(labels) && labels[j] != '"'; j++ {
			c := labels[j]
			if c == '\\' && j+1 < len(labels) {
				j++
				c = labels[j]
				if c == 'n' {
					c = '\n'
				}
			}
			val = append(val, c)
		}
		if j >= len(labels) {
			return "", false
		}
		if name == key {
			return string(val), true
		}
		labels = bytes.TrimLeft(labels[j+1:], ", ")
	}
	return "", false
}

// ServerScrape is one reading of a server's GET /metrics: its histograms' totals, its
// speculative-decoding counters and its energy counters (joules by source).
type ServerScrape struct {
	Histograms map[string][2]float64
	Spec       SpecCounters
	Energy     map[string]float64
}

// ScrapeServer fetches GET /metrics and parses its histograms, spec_decode and energy
// counters.
func ScrapeServer(ctx context.Context, client *http.Client, baseURL, apiKey string) (ServerScrape, error) {
	var s ServerScrape
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/metrics", nil)
	if err != nil {
		return s, err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return s, fmt.Errorf("GET /metrics: %w", err)
	}
	if s.Histograms, err = ParsePrometheusHistograms(bytes.NewReader(body)); err != nil {
		return s, err
	}
	if s.Spec, err = ParseSpecDecodeCounters(bytes.NewReader(body)); err != nil {
		return s, err
	}
	s.Energy, err = ParseEnergyCounters(bytes.NewReader(body))
	return s, err
}

// ServerLatencyDelta compares two scrapes and returns the server's mean latencies over the
// requests between them, or nil when neither kvasir's nor vLLM's histograms moved.
func ServerLatencyDelta(before, after map[string][2]float64) *ServerLatency {
	mean := func(name string) (float64, float64) {
		a, b := after[name], before[name]
		n := a[1] - b[1]
		if n <= 0 {
			return 0, 0
		}
		return (a[0] - b[0]) / n * 1000, n
	}
	for _, prefix := range []string{"kvasir", "vllm"} {
		ttft, n := mean(prefix + ":time_to_first_token_seconds")
		if n == 0 {
			continue
		}
		s := &ServerLatency{Prefix: prefix, TTFT: ttft, Requests: n}
		s.ITL, _ = mean(prefix + ":inter_token_latency_seconds")
		if s.ITL == 0 {
			s.ITL, _ = mean(prefix + ":time_per_output_token_seconds")
		}
		s.E2EL, _ = mean(prefix + ":e2e_request_latency_seconds")
		return s
	}
	return nil
}
