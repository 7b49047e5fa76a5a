package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
)

// repeatLast proposes the sequence's last token again: sometimes right.
type repeatLast struct{}

func (repeatLast) Propose(tokens []int32, n int) []int32 {
	d := make([]int32, n)
	for i := range d {
		d[i] = tokens[len(tokens)-1]
	}
	return d
}

// TestSpecDecodeMetrics: an engine that speculates exports vLLM's spec_decode counters from
// its stats, one per-position counter per draft position; one that does not exports none.
func TestSpecDecodeMetrics(t *testing.T) {
	opt := kvasir.Options{Speculative: &kvasir.SpeculativeConfig{Proposer: repeatLast{}, NumSpeculativeTokens: 3, DisableDynamic: true}}
	env := newTestEnv(t, opt, Config{})
	var res completionResponse
	env.post(t, "/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 12, "ignore_eos": true, "temperature": 0}, &res)
	_, body := env.do(t, http.MethodGet, "/metrics", nil)
	m := string(body)
	s := env.eng.Stats()
	if s.DraftTokens == 0 {
		t.Fatal("no drafts were verified")
	}
	for _, want := range []string{
		fmt.Sprintf(`kvasir:spec_decode_num_drafts_total{engine="0",model_name="tiny"} %d`, s.SpecDrafts),
		fmt.Sprintf(`kvasir:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} %d`, s.DraftTokens),
		fmt.Sprintf(`kvasir:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} %d`, s.AcceptedDrafts),
		fmt.Sprintf(`kvasir:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} %d`, s.AcceptedPerPos[0]),
		fmt.Sprintf(`kvasir:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"} %d`, s.AcceptedPerPos[2]),
		"# TYPE kvasir:spec_decode_num_draft_tokens_total counter",
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(m, `position="3"`) {
		t.Error("a per-position counter beyond K = 3")
	}
	// Inter-token latency is timed per step, as vLLM times iterations: one request of 12
	// tokens over S steps that brought tokens has S - 1 gaps, fewer than 11 when drafts
	// were accepted (a step brought several tokens).
	fams := scrape(t, env)
	steps := fams["kvasir:iteration_tokens_total"].Metric[0].Histogram.GetSampleCount()
	gaps := fams["kvasir:inter_token_latency_seconds"].Metric[0].Histogram.GetSampleCount()
	if gaps != steps-1 || (s.AcceptedDrafts > 0 && gaps >= 11) {
		t.Errorf("%d inter-token gaps over %d steps (%d drafts accepted)", gaps, steps, s.AcceptedDrafts)
	}
	if sum := fams["kvasir:iteration_tokens_total"].Metric[0].Histogram.GetSampleSum(); sum != float64(res.Usage.PromptTokens+12) {
		t.Errorf("iteration tokens sum %g, want the prompt's %d + 12", sum, res.Usage.PromptTokens)
	}

	plain := newTestEnv(t, kvasir.Options{}, Config{})
	if _, body := plain.do(t, http.MethodGet, "/metrics", nil); strings.Contains(string(body), "spec_decode") {
		t.Error("an engine that does not speculate exports spec_decode counters")
	}
}
