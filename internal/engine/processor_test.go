package engine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// cycleMasker allows, as the i-th output token, only ids congruent to i modulo 3, and keeps
// the tokens it accepted, so that a test can check they are the choice's output.
type cycleMasker struct {
	vocab int
	hist  []int32
	mask  sample.Mask
}

func (c *cycleMasker) Mask() sample.Mask {
	c.mask = sample.NewMask(c.vocab)
	for id := int32(len(c.hist) % 3); int(id) < c.vocab; id += 3 {
		c.mask.Set(id)
	}
	return c.mask
}

func (c *cycleMasker) Accept(tokens []int32) error {
	for _, t := range tokens {
		if int(t)%3 != len(c.hist)%3 {
			return errors.New("cycleMasker: token out of turn")
		}
		c.hist = append(c.hist, t)
	}
	return nil
}

func (c *cycleMasker) Rollback(n int) { c.hist = c.hist[:len(c.hist)-n] }

func (c *cycleMasker) Clone() sample.Stateful {
	return &cycleMasker{vocab: c.vocab, hist: slices.Clone(c.hist)}
}

// fakeGreedyCycle is fakeGreedy under cycleMasker's rule.
func fakeGreedyCycle(vocab int, prompt []int32, n int) []int32 {
	toks := slices.Clone(prompt)
	var out []int32
	for len(out) < n {
		l := fakeLogits(vocab, toks)
		(&cycleMasker{vocab: vocab, hist: out}).Mask().Apply(l)
		t := int32(sample.Greedy(l))
		out = append(out, t)
		toks = append(toks, t)
	}
	return out
}

// TestProcessorMask: a processor's mask is honoured whichever way tokens are picked (the
// model's greedy pick with the mask, a device draw with it, the host's logits path when
// logprobs are asked, a fork's clones), with drafts that break the rule rolled back from
// the processor too: every output token keeps the rule, greedy choices equal masked
// greedy decoding, and the processor ends holding exactly the choice's output.
func TestProcessorMask(t *testing.T) {
	const vocab, n = 60, 25
	prompt := randomPrompt(21, 9, vocab)
	want := fakeGreedyCycle(vocab, prompt, n)
	seed := uint64(3)
	cases := []struct {
		name      string
		params    SamplingParams
		canSample bool
		greedy    bool
	}{
		{"greedy", SamplingParams{}, false, true},
		{"greedy logprobs", SamplingParams{Logprobs: true}, false, true},
		{"device sample", SamplingParams{Temperature: 1, Seed: &seed}, true, false},
		{"host sample", SamplingParams{Temperature: 1, Seed: &seed}, false, false},
		{"n=3", SamplingParams{Temperature: 1, Seed: &seed, N: 3}, false, false},
	}
	for _, tc := range cases {
		for _, prop := range []Proposer{nil, &oracleProposer{vocab: vocab, wrong: true}} {
			forEachMode(t, func(t *testing.T, serial bool) {
				e, _ := fakeEngine(t, vocab, Config{Speculation: specWith(prop, 3), DisableAsyncScheduling: serial}, tc.canSample)
				proc := &cycleMasker{vocab: vocab}
				p := tc.params
				p.MaxTokens, p.IgnoreEOS = n, true
				got := generate(t, e, []Request{{PromptTokens: prompt, Params: p, Processors: []sample.Stateful{proc}}})[0]
				for i, r := range got {
					for j, tok := range r.tokens {
						if int(tok)%3 != j%3 {
							t.Fatalf("%s: choice %d token %d is %d, against the mask", tc.name, i, j, tok)
						}
					}
					if len(r.tokens) != n {
						t.Errorf("%s: choice %d has %d tokens", tc.name, i, len(r.tokens))
					}
				}
				if tc.greedy && !slices.Equal(got[0].tokens, want) {
					t.Errorf("%s: %v, want masked greedy %v", tc.name, got[0].tokens, want)
				}
				if !slices.Equal(proc.hist, got[0].tokens) {
					t.Errorf("%s: the processor holds %v, the output is %v", tc.name, proc.hist, got[0].tokens)
				}
			})
		}
	}
}

// emptyMasker allows nothing.
type emptyMasker struct{ vocab int }

func (m emptyMasker) Mask() sample.Mask      { return sample.NewMask(m.vocab) }
func (m emptyMasker) Accept([]int32) error   { return nil }
func (m emptyMasker) Rollback(int)           {}
func (m emptyMasker) Clone() sample.Stateful { return m }

// TestProcessorAllowsNothing: a mask that allows no token fails its request with an error,
// and the engine serves the next one.
func TestProcessorAllowsNothing(t *testing.T) {
	const vocab = 40
	for _, canSample := range []bool{false, true} {
		e, _ := fakeEngine(t, vocab, Config{}, canSample)
		ch, err := e.Generate(t.Context(), Request{PromptTokens: randomPrompt(1, 5, vocab), Params: SamplingParams{MaxTokens: 4},
			Processors: []sample.Stateful{emptyMasker{vocab}}})
		if err != nil {
			t.Fatal(err)
		}
		var last Output
		for o := range ch {
			last = o
		}
		if !errors.Is(last.Err, errNoToken) || last.FinishReason != FinishAbort {
			t.Errorf("canSample %v: last output %+v, want an abort with errNoToken", canSample, last)
		}
		got := generate(t, e, []Request{{PromptTokens: randomPrompt(2, 5, vocab), Params: SamplingParams{MaxTokens: 4, IgnoreEOS: true}}})
		if len(got[0][0].tokens) != 4 {
			t.Errorf("the next request got %v", got[0][0].tokens)
		}
	}
}

// TestProcessorMaskModel: on a real model (CPU), a processor that allows ten tokens gives
// the same greedy output as a logit bias of -100 on every other token (a different path:
// host logits through the sampler's processors).
func TestProcessorMaskModel(t *testing.T) {
	tm := newTinyModel(t)
	vocab := tm.fm.Config.VocabSize
	allowed := []int32{3, 17, 40, 41, 99, 120, 200, 201, 250, 300}
	bias := map[int32]float32{}
	for id := range vocab {
		if !slices.Contains(allowed, int32(id)) {
			bias[int32(id)] = -100
		}
	}
	prompt := randomPrompt(4, 12, vocab)
	for _, serial := range []bool{false, true} {
		e := tm.engine(t, Config{DisableAsyncScheduling: serial})
		got := generate(t, e, []Request{
			{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 20, IgnoreEOS: true}, Processors: []sample.Stateful{&setMasker{mask: sample.NewMask(vocab, allowed...)}}},
			{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 20, IgnoreEOS: true, LogitBias: bias}},
		})
		for _, tok := range got[0][0].tokens {
			if !slices.Contains(allowed, tok) {
				t.Fatalf("token %d is not allowed", tok)
			}
		}
		if !slices.Equal(got[0][0].tokens, got[1][0].tokens) {
			t.Errorf("masked %v, biased %v", got[0][0].tokens, got[1][0].tokens)
		}
	}
}

// setMasker allows a fixed set of tokens.
type setMasker struct{ mask sample.Mask }

func (m *setMasker) Mask() sample.Mask      { return m.mask }
func (m *setMasker) Accept([]int32) error   { return nil }
func (m *setMasker) Rollback(int)           {}
func (m *setMasker) Clone() sample.Stateful { return m }

// busyMasker is cycleMasker that notes, at each Mask, whether a forward pass is under way
// on its backend (waiting a little for one to start, since the loop hands the step over
// just before).
type busyMasker struct {
	cycleMasker
	sb            *slowBackend
	during, masks int
}

func (b *busyMasker) Mask() sample.Mask {
	b.masks++
	for deadline := time.Now().Add(20 * time.Millisecond); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if b.sb.busy.Load() > 0 {
			b.during++
			break
		}
	}
	return b.cycleMasker.Mask()
}

// TestHostMasksOverlap: when the host samples (a CPU backend at temperature 1), a step's
// masks are computed while its forward pass runs, not after it, with asynchronous
// scheduling; serial scheduling computes them after. Either way the output keeps the mask.
func TestHostMasksOverlap(t *testing.T) {
	tm, sb := slowModel(t, newTinyModel(t), 10*time.Millisecond)
	vocab := tm.fm.Config.VocabSize
	seed := uint64(5)
	for _, serial := range []bool{false, true} {
		e := tm.engine(t, Config{DisableAsyncScheduling: serial, DisableJumpForward: true})
		proc := &busyMasker{cycleMasker: cycleMasker{vocab: vocab}, sb: sb}
		got := generate(t, e, []Request{{PromptTokens: randomPrompt(3, 8, vocab), Params: SamplingParams{MaxTokens: 12, IgnoreEOS: true, Temperature: 1, Seed: &seed},
			Processors: []sample.Stateful{proc}}})[0][0].tokens
		for j, tok := range got {
			if int(tok)%3 != j%3 {
				t.Fatalf("serial %v: token %d is %d, against the mask", serial, j, tok)
			}
		}
		t.Logf("serial %v: %d of %d masks computed during a forward pass", serial, proc.during, proc.masks)
		if !serial && proc.during < proc.masks-1 {
			t.Errorf("async: only %d of %d masks were computed while the forward pass ran", proc.during, proc.masks)
		}
		if serial && proc.during != 0 {
			t.Errorf("serial: %d masks computed during a forward pass", proc.during)
		}
	}
}
