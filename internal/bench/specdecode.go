package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/engine"
)

// SpecDecode is what speculative decoding did over a run, under the keys of vLLM's
// benchmark results: the acceptance rate (accepted / draft tokens, in percent), the mean
// acceptance length (1 + accepted / drafts: the tokens a verification yields, its bonus
// token included), the counts, and per draft position the share of drafts that kept it.
type SpecDecode struct {
	AcceptanceRate   float64 `json:"spec_decode_acceptance_rate"`
	AcceptanceLength float64 `json:"spec_decode_acceptance_length"`
	NumDrafts        int64   `json:"spec_decode_num_drafts"`
	DraftTokens      int64   `json:"spec_decode_draft_tokens"`
	AcceptedTokens   int64   `json:"spec_decode_accepted_tokens"`
	// PerPosition[i] is the drafts that kept draft i over all drafts (a fraction).
	PerPosition []float64 `json:"spec_decode_per_position_acceptance_rates"`
}

// newSpecDecode computes the figures from the counts of a run (perPos: the drafts that
// kept each position).
func newSpecDecode(drafts, draftTokens, accepted int64, perPos []int64) *SpecDecode {
	s := &SpecDecode{NumDrafts: drafts, DraftTokens: draftTokens, AcceptedTokens: accepted, PerPosition: make([]float64, len(perPos))}
	if draftTokens > 0 {
		s.AcceptanceRate = 100 * float64(accepted) / float64(draftTokens)
	}
	if drafts > 0 {
		s.AcceptanceLength = 1 + float64(accepted)/float64(drafts)
		for i, n := range perPos {
			s.PerPosition[i] = float64(n) / float64(drafts)
		}
	}
	return s
}

// SpecDecodeFromStats returns the figures of the run between two readings of an engine's
// stats, for the k draft positions of its configuration.
func SpecDecodeFromStats(before, after kvasir.Stats, k int) *SpecDecode {
	k = min(max(k, 0), engine.MaxSpeculativeTokens)
	perPos := make([]int64, k)
	for i := range perPos {
		perPos[i] = after.AcceptedPerPos[i] - before.AcceptedPerPos[i]
	}
	return newSpecDecode(after.SpecDrafts-before.SpecDrafts, after.DraftTokens-before.DraftTokens,
		after.AcceptedDrafts-before.AcceptedDrafts, perPos)
}

// SpecCounters are a server's speculative-decoding counters, kvasir's or vLLM's
// (PREFIX:spec_decode_num_drafts_total, ..._num_draft_tokens_total,
// ..._num_accepted_tokens_total, ..._num_accepted_tokens_per_pos_total{position}), summed
// over their other labels.
type SpecCounters struct {
	// Prefix is "kvasir" or "vllm"; "" when the server exports none.
	Prefix                        string
	Drafts, DraftTokens, Accepted float64
	// PerPos holds the per-position counter by position.
	PerPos map[int]float64
}

// maxPositions bounds the draft positions read from a server (a position label beyond it
// is ignored, so that a bad one cannot make a huge list).
const maxPositions = 1024

// specPrefixes are the metric prefixes whose spec_decode counters are read, in order.
var specPrefixes = []string{"kvasir", "vllm"}

// ParseSpecDecodeCounters reads the spec_decode counters of a Prometheus text exposition
// (the first prefix of kvasir, vllm that has them).
func ParseSpecDecodeCounters(r io.Reader) (SpecCounters, error) {
	found := map[string]*SpecCounters{}
	err := scanSamples(r, func(name, labels []byte, v float64) {
		prefix, metric, ok := strings.Cut(string(name), ":spec_decode_")
		if !ok {
			return
		}
		c := found[prefix]
		if c == nil {
			c = &SpecCounters{Prefix: prefix, PerPos: map[int]float64{}}
			found[prefix] = c
		}
		switch metric {
		case "num_drafts_total":
			c.Drafts += v
		case "num_draft_tokens_total":
			c.DraftTokens += v
		case "num_accepted_tokens_total":
			c.Accepted += v
		case "num_accepted_tokens_per_pos_total":
			p, ok := labelValue(labels, "position")
			if !ok {
				return
			}
			if pos, err := strconv.Atoi(p); err == nil && pos >= 0 && pos < maxPositions {
				c.PerPos[pos] += v
			}
		}
	})
	if err != nil {
		return SpecCounters{}, err
	}
	for _, p := range specPrefixes {
		if c := found[p]; c != nil {
			return *c, nil
		}
	}
	return SpecCounters{}, nil
}

// SpecDecodeDelta returns the figures of the run between two scrapes, or nil when the
// server exports no spec_decode counters (it does not speculate).
func SpecDecodeDelta(before, after SpecCounters) *SpecDecode {
	if after.Prefix == "" {
		return nil
	}
	if before.Prefix != after.Prefix {
		before = SpecCounters{}
	}
	n := 0
	for pos := range after.PerPos {
		n = max(n, pos+1)
	}
	perPos := make([]int64, n)
	for pos, v := range after.PerPos {
		perPos[pos] = int64(v - before.PerPos[pos])
	}
	return newSpecDecode(int64(after.Drafts-before.Drafts), int64(after.DraftTokens-before.DraftTokens),
		int64(after.Accepted-before.Accepted), perPos)
}

// writeSpecDecode prints the figures in the layout of vLLM's summary: its
// "Speculative Decoding" section, lines of a 40-wide label and the value.
func writeSpecDecode(w io.Writer, s *SpecDecode, valueFormat string) {
	fmt.Fprintln(w, center("Speculative Decoding", '-', 50))
	line := func(label string, v any) { fmt.Fprintf(w, "%-40s "+valueFormat+"\n", label, v) }
	fmt.Fprintf(w, "%-40s "+floatFormat(valueFormat)+"\n", "Acceptance rate (%):", s.AcceptanceRate)
	fmt.Fprintf(w, "%-40s "+floatFormat(valueFormat)+"\n", "Acceptance length:", s.AcceptanceLength)
	line("Drafts:", s.NumDrafts)
	line("Draft tokens:", s.DraftTokens)
	line("Accepted tokens:", s.AcceptedTokens)
	if len(s.PerPosition) > 0 {
		fmt.Fprintln(w, "Per-position acceptance (%):")
		for i, r := range s.PerPosition {
			fmt.Fprintf(w, "%-40s "+floatFormat(valueFormat)+"\n", fmt.Sprintf("  Position %d:", i), 100*r)
		}
	}
}

// floatFormat turns a value format ("%-10v", "%10v") into its two-decimal float twin.
func floatFormat(f string) string { return strings.TrimSuffix(f, "v") + ".2f" }
