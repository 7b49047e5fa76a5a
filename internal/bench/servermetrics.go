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
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var name, rest []byte
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
			name, rest = line[:i], line[end+1:]
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
	}
	return out, sc.Err()
}

// ScrapeHistograms fetches GET /metrics and parses its histograms.
func ScrapeHistograms(ctx context.Context, client *http.Client, baseURL, apiKey string) (map[string][2]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return ParsePrometheusHistograms(io.LimitReader(resp.Body, 64<<20))
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
