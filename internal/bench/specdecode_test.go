package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
)

func TestSpecDecodeFromStats(t *testing.T) {
	before := kvasir.Stats{SpecDrafts: 10, DraftTokens: 40, AcceptedDrafts: 20}
	before.AcceptedPerPos[0], before.AcceptedPerPos[1] = 8, 5
	after := kvasir.Stats{SpecDrafts: 110, DraftTokens: 440, AcceptedDrafts: 270}
	after.AcceptedPerPos[0], after.AcceptedPerPos[1], after.AcceptedPerPos[2], after.AcceptedPerPos[3] = 98, 75, 60, 42
	s := SpecDecodeFromStats(before, after, 4)
	want := SpecDecode{AcceptanceRate: 62.5, AcceptanceLength: 3.5, NumDrafts: 100, DraftTokens: 400, AcceptedTokens: 250,
		PerPosition: []float64{0.9, 0.7, 0.6, 0.42}}
	if s.AcceptanceRate != want.AcceptanceRate || s.AcceptanceLength != want.AcceptanceLength || s.NumDrafts != 100 ||
		s.DraftTokens != 400 || s.AcceptedTokens != 250 || len(s.PerPosition) != 4 {
		t.Fatalf("%+v, want %+v", s, want)
	}
	for i, r := range want.PerPosition {
		if math.Abs(s.PerPosition[i]-r) > 1e-12 {
			t.Errorf("position %d: %g, want %g", i, s.PerPosition[i], r)
		}
	}
	// No drafts in the run: zeros, not NaN.
	z := SpecDecodeFromStats(after, after, 2)
	if z.AcceptanceRate != 0 || z.AcceptanceLength != 0 || len(z.PerPosition) != 2 || z.PerPosition[1] != 0 {
		t.Errorf("no drafts: %+v", z)
	}
}

func TestParseSpecDecodeCounters(t *testing.T) {
	text := `# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 30
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 10
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 120
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 60
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 30
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="a \"q\" ,position=\"9\"",position="1"} 20
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="x"} 99
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m"} 99
vllm:spec_decode_num_accepted_tokens_per_pos_total{position="99999999"} 99
vllm:spec_decode_num_drafts_created{engine="0"} 1.7e9
`
	c, err := ParseSpecDecodeCounters(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if c.Prefix != "vllm" || c.Drafts != 40 || c.DraftTokens != 120 || c.Accepted != 60 || len(c.PerPos) != 2 || c.PerPos[0] != 30 || c.PerPos[1] != 20 {
		t.Fatalf("%+v", c)
	}
	before := SpecCounters{Prefix: "vllm", Drafts: 20, DraftTokens: 80, Accepted: 40, PerPos: map[int]float64{0: 15, 1: 10}}
	d := SpecDecodeDelta(before, c)
	if d == nil || d.NumDrafts != 20 || d.DraftTokens != 40 || d.AcceptedTokens != 20 || d.AcceptanceRate != 50 || d.AcceptanceLength != 2 ||
		len(d.PerPosition) != 2 || d.PerPosition[0] != 0.75 || d.PerPosition[1] != 0.5 {
		t.Errorf("delta %+v", d)
	}
	// kvasir's prefix first; none at all gives no figures.
	both := text + "kvasir:spec_decode_num_drafts_total{model_name=\"k\"} 5\n"
	if c, _ := ParseSpecDecodeCounters(strings.NewReader(both)); c.Prefix != "kvasir" || c.Drafts != 5 {
		t.Errorf("kvasir's counters: %+v", c)
	}
	none, err := ParseSpecDecodeCounters(strings.NewReader("kvasir:num_requests_running 0\n"))
	if err != nil || none.Prefix != "" || SpecDecodeDelta(SpecCounters{}, none) != nil {
		t.Errorf("no counters: %+v, %v", none, err)
	}
}

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct {
		labels, key, want string
		ok                bool
	}{
		{`a="1",b="2"`, "b", "2", true},
		{`a="x\"y",b="2"`, "a", `x"y`, true},
		{`a="line\nnext\\"`, "a", "line\nnext\\", true},
		{`a="1", position="3"`, "position", "3", true},
		{`a="1"`, "b", "", false},
		{`a=1`, "a", "", false},
		{`a="unterminated`, "a", "", false},
		{``, "a", "", false},
	} {
		got, ok := labelValue([]byte(tc.labels), tc.key)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s [%s]: %q %v, want %q %v", tc.labels, tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseSpecDecodeCounters: any exposition parses without a panic into figures with
// a bounded number of positions.
func FuzzParseSpecDecodeCounters(f *testing.F) {
	f.Add("kvasir:spec_decode_num_drafts_total{model_name=\"m\"} 3\nkvasir:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 2\n")
	f.Add("vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\\\"\",x=\"}\"} NaN\n")
	f.Add("a:spec_decode_x{position=\"-1\"} +Inf\n:spec_decode_num_drafts_total 1e308\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseSpecDecodeCounters(strings.NewReader(text))
		if err != nil {
			return
		}
		if len(c.PerPos) > maxPositions {
			t.Fatalf("%d positions", len(c.PerPos))
		}
		if d := SpecDecodeDelta(SpecCounters{}, c); d != nil && len(d.PerPosition) > maxPositions {
			t.Fatalf("%d positions", len(d.PerPosition))
		}
		SpecDecodeDelta(c, c)
	})
}

// TestWriteSpecDecodeSummaries: both reports print vLLM's "Speculative Decoding" section
// when there are figures, and the offline JSON gains its keys and keeps the others.
func TestWriteSpecDecodeSummaries(t *testing.T) {
	sd := &SpecDecode{AcceptanceRate: 62.5, AcceptanceLength: 3.5, NumDrafts: 100, DraftTokens: 400, AcceptedTokens: 250, PerPosition: []float64{0.9, 0.25}}
	var b bytes.Buffer
	WriteOfflineSummary(&b, OfflineResult{Completed: 3, SpecDecode: sd})
	for _, line := range []string{
		"---------------Speculative Decoding---------------\n",
		"Acceptance rate (%):                          62.50\n",
		"Acceptance length:                             3.50\n",
		"Drafts:                                         100\n",
		"Draft tokens:                                   400\n",
		"Accepted tokens:                                250\n",
		"Per-position acceptance (%):\n" + fmt.Sprintf("%-40s %10.2f\n%-40s %10.2f\n", "  Position 0:", 90.0, "  Position 1:", 25.0),
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("offline summary lacks %q:\n%s", line, b.String())
		}
	}
	b.Reset()
	WriteOfflineSummary(&b, OfflineResult{Completed: 3})
	if strings.Contains(b.String(), "Speculative") {
		t.Error("a run without speculation prints its section")
	}
	data, err := json.Marshal(OfflineResult{Completed: 3, SpecDecode: sd})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m["spec_decode_acceptance_rate"] != 62.5 || m["spec_decode_acceptance_length"] != 3.5 || m["spec_decode_num_drafts"] != 100.0 ||
		m["completed"] != 3.0 || m["output_throughput"] == nil {
		t.Errorf("offline JSON %s", data)
	}
	if data, _ := json.Marshal(OfflineResult{}); strings.Contains(string(data), "spec_decode") {
		t.Errorf("offline JSON without speculation %s", data)
	}

	b.Reset()
	res := &Result{SpecDecode: sd}
	WriteSummary(&b, Report{}, res)
	if !strings.Contains(b.String(), "Acceptance length:                       3.50      \n") {
		t.Errorf("serve summary:\n%s", b.String())
	}
	js, err := ResultJSON(Report{}, res, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"spec_decode_acceptance_rate": 62.5`, `"spec_decode_acceptance_length": 3.5`, `"spec_decode_num_drafts": 100`,
		`"spec_decode_draft_tokens": 400`, `"spec_decode_accepted_tokens": 250`, `"spec_decode_per_position_acceptance_rates": [`} {
		if !strings.Contains(string(js), key) {
			t.Errorf("serve JSON lacks %s", key)
		}
	}
}

// TestOfflineSpeculative: an offline run on an engine that speculates reports the figures
// of its drafts.
func TestOfflineSpeculative(t *testing.T) {
	e := storiesEngine(t, kvasir.Options{KVCacheMemory: 8 << 20,
		Speculative: &kvasir.SpeculativeConfig{Method: "ngram", NumSpeculativeTokens: 3, PromptLookupMin: 1, PromptLookupMax: 2}})
	reqs, err := OfflineRequests(context.Background(), e, OfflineOptions{NumPrompts: 3, InputLen: 8, OutputLen: 40, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := Offline(context.Background(), e, reqs, 1, kvasir.SamplingParams{IgnoreEOS: true})
	sd := res.SpecDecode
	if sd == nil || len(sd.PerPosition) != 3 {
		t.Fatalf("figures %+v", sd)
	}
	if st := e.Stats(); sd.DraftTokens != st.DraftTokens || sd.AcceptedTokens != st.AcceptedDrafts || sd.NumDrafts != st.SpecDrafts {
		t.Errorf("figures %+v, engine %+v", sd, st)
	}
}

// TestServeSpecDecode: bench serve takes the figures of its run from the server's
// spec_decode counters before and after, prints them and saves them; a server without the
// counters gives none.
func TestServeSpecDecode(t *testing.T) {
	for _, withSpec := range []bool{true, false} {
		s := newFake(t, &fakeServer{Tokens: 4, Spec: withSpec})
		var out bytes.Buffer
		res, err := Serve(context.Background(), ServeOptions{BaseURL: s.URL, Endpoint: "/v1/completions",
			Dataset:         DatasetConfig{Name: DatasetRandom, NumPrompts: 5, RandomInputLen: 8, RandomOutputLen: 4, Seed: 1},
			DisableProgress: true, Out: &out})
		if err != nil {
			t.Fatal(err)
		}
		if !withSpec {
			if res.SpecDecode != nil || strings.Contains(out.String(), "Speculative") {
				t.Errorf("figures without counters: %+v", res.SpecDecode)
			}
			continue
		}
		sd := res.SpecDecode
		if sd == nil || sd.NumDrafts != 10 || sd.DraftTokens != 40 || sd.AcceptedTokens != 25 || sd.AcceptanceLength != 3.5 ||
			sd.AcceptanceRate != 62.5 || len(sd.PerPosition) != 4 || sd.PerPosition[0] != 1 || sd.PerPosition[3] != 0 {
			t.Fatalf("figures %+v", sd)
		}
		if !strings.Contains(out.String(), "---------------Speculative Decoding---------------\nAcceptance rate (%):                     62.50") {
			t.Errorf("summary:\n%s", out.String())
		}
	}
}
