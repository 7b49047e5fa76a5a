package engine

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestSeededParallelSampling(t *testing.T) {
	tm := newTinyModel(t)
	seed := uint64(42)
	req := Request{PromptTokens: randomPrompt(9, 37, 320), Params: SamplingParams{N: 4, MaxTokens: 20, Temperature: 1, TopP: 0.95, Seed: &seed, IgnoreEOS: true}}
	var runs [][]result
	for _, cfg := range []Config{{}, {DisablePrefixCaching: true}, {NumBlocks: 14, BlockSize: 8}} {
		e := tm.engine(t, cfg)
		// Alone, and again among other traffic.
		runs = append(runs, generate(t, e, []Request{req})[0])
		others := workload(6, 320)
		runs = append(runs, generate(t, e, append([]Request{req}, others...))[0])
		waitIdle(t, e)
	}
	first := runs[0]
	distinct := map[string]bool{}
	for _, r := range first {
		distinct[fmtTokens([]result{r})] = true
		if len(r.tokens) != 20 {
			t.Errorf("choice has %d tokens", len(r.tokens))
		}
	}
	if len(distinct) < 3 {
		t.Errorf("4 seeded choices are too alike: %v", distinct)
	}
	for k, run := range runs[1:] {
		for i := range run {
			if !slices.Equal(run[i].tokens, first[i].tokens) {
				t.Errorf("run %d choice %d: %v, want %v", k+1, i, run[i].tokens, first[i].tokens)
			}
		}
	}
	if u := first[3].usage; u.PromptTokens != 37 || u.CompletionTokens != 80 {
		t.Errorf("usage %+v", u)
	}
}

// TestStopStrings finds stop strings that span token boundaries in stories260K's greedy
// story and checks the text ends right before them (or after, when included).
func TestStopStrings(t *testing.T) {
	tm := storiesModel(t)
	e := tm.engine(t, Config{})
	prompt := Request{Prompt: "Once upon a time", Params: SamplingParams{MaxTokens: 60}}
	full := generate(t, e, []Request{prompt})[0][0]
	if !strings.Contains(full.text, "Lily") && len(full.text) < 40 {
		t.Fatalf("unexpected story %q", full.text)
	}
	// Pick stop strings spanning token boundaries: the text of tokens 10..12, cut inside.
	decode := func(n int) string {
		ids := make([]int, n)
		for i := range ids {
			ids[i] = int(full.tokens[i])
		}
		return tm.tok.Decode(ids, true)
	}
	start := len(decode(10))
	span := decode(13)[start:]
	stop := strings.TrimSpace(span[1 : len(span)-1])
	if len(stop) < 3 {
		t.Fatalf("stop %q too short", stop)
	}
	at := strings.Index(full.text, stop)
	if at < 0 || at > start+2 {
		t.Fatalf("stop %q found at %d, expected near %d in %q", stop, at, start, full.text)
	}
	for _, include := range []bool{false, true} {
		p := prompt
		p.Params.Stop = []string{"never-appears", stop}
		p.Params.IncludeStopStrInOutput = include
		r := generate(t, e, []Request{p})[0][0]
		want := full.text[:at]
		if include {
			want += stop
		}
		if r.text != want || r.finish != FinishStop || r.stop != stop {
			t.Errorf("include=%v: text %q finish %q stop %v; want %q", include, r.text, r.finish, r.stop, want)
		}
	}
	// Stop token ids end the choice; min_tokens holds them back.
	p := prompt
	p.Params.StopTokenIDs = []int32{full.tokens[3]}
	r := generate(t, e, []Request{p})[0][0]
	if len(r.tokens) != 4 || r.finish != FinishStop || r.stop != full.tokens[3] {
		t.Errorf("stop token: %d tokens, finish %q, stop %v", len(r.tokens), r.finish, r.stop)
	}
	p.Params.MinTokens = 5
	r = generate(t, e, []Request{p})[0][0]
	if len(r.tokens) < 5 || slices.Contains(r.tokens[:4], full.tokens[3]) {
		t.Errorf("min_tokens 5: tokens %v", r.tokens)
	}
	waitIdle(t, e)
}

func TestLogprobsAndBias(t *testing.T) {
	tm := newTinyModel(t)
	e := tm.engine(t, Config{})
	prompt := randomPrompt(4, 12, 320)
	r := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 6, IgnoreEOS: true, Logprobs: true, TopLogprobs: 3}}})[0][0]
	if len(r.lps) != 6 {
		t.Fatalf("%d logprobs for 6 tokens", len(r.lps))
	}
	for i, lp := range r.lps {
		if lp.Token.ID != r.tokens[i] || len(lp.Top) != 3 || lp.Top[0].ID != r.tokens[i] || lp.Token.Logprob != lp.Top[0].Logprob {
			t.Errorf("token %d: greedy token %d, logprobs %+v", i, r.tokens[i], lp)
		}
		if lp.Token.Logprob > 0 || math.IsNaN(float64(lp.Token.Logprob)) || lp.Top[1].Logprob > lp.Top[0].Logprob {
			t.Errorf("token %d: bad logprobs %+v", i, lp)
		}
	}
	// A bias of 100 on a token forces it; the logprobs stay those of the raw model.
	forced := int32(77)
	b := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 3, IgnoreEOS: true, LogitBias: map[int32]float32{forced: 100}, Logprobs: true}}})[0][0]
	for i, id := range b.tokens {
		if id != forced {
			t.Errorf("token %d is %d, want the forced %d", i, id, forced)
		}
	}
	// A strong repetition penalty changes a greedy continuation that repeats.
	rep := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 6, IgnoreEOS: true, FrequencyPenalty: 2, PresencePenalty: 2}}})[0][0]
	seen := map[int32]int{}
	for _, id := range rep.tokens {
		seen[id]++
	}
	for id, c := range seen {
		if c > 2 {
			t.Errorf("token %d repeated %d times despite penalties: %v", id, c, rep.tokens)
		}
	}
}
