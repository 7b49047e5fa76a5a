package kvasir

import (
	"context"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// vowelsOnly is a Masker (through the public API's types) that allows a fixed set of
// tokens and records what it is told.
type vowelsOnly struct {
	mask     Mask
	accepted []int32
}

func (v *vowelsOnly) Mask() Mask { return v.mask }
func (v *vowelsOnly) Accept(tokens []int32) error {
	v.accepted = append(v.accepted, tokens...)
	return nil
}
func (v *vowelsOnly) Rollback(n int) { v.accepted = v.accepted[:len(v.accepted)-n] }
func (v *vowelsOnly) Clone() Processor {
	return &vowelsOnly{mask: v.mask, accepted: slices.Clone(v.accepted)}
}

// replay proposes the continuation of a recorded run, every other draft wrong.
type replay struct{ ref []int32 }

func (r *replay) Propose(tokens []int32, n int) []int32 {
	if len(tokens) >= len(r.ref) || !slices.Equal(tokens, r.ref[:len(tokens)]) {
		return nil
	}
	d := slices.Clone(r.ref[len(tokens):min(len(r.ref), len(tokens)+n)])
	for i := 1; i < len(d); i += 2 {
		d[i] ^= 1
	}
	return d
}

// storyTokens runs a greedy request on e and returns its prompt and output tokens.
func storyTokens(t *testing.T, e *Engine, req Request) (prompt, out []int32) {
	t.Helper()
	ch, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for o := range ch {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if o.PromptTokenIDs != nil {
			prompt = o.PromptTokenIDs
		}
		out = append(out, o.TokenIDs...)
	}
	return prompt, out
}

// TestPublicSeams: a Go program reaches the engine's seams through package kvasir alone:
// a Masker restricts a request's tokens (and is told exactly the output), and a Proposer's
// drafts leave greedy output unchanged (stories260K in Q8_0, whose int8 matmuls give the
// same bits for one token or several a step).
func TestPublicSeams(t *testing.T) {
	p := testdata.Path(t, "models/stories260K/stories260K-Q8_0.gguf")
	opt := Options{Threads: 2, KVCacheMemory: 4 << 20}
	e, err := Open(p, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	base := Request{Prompt: "Once upon a time", Params: SamplingParams{MaxTokens: 40, IgnoreEOS: true, PromptLogprobs: true}}
	prompt, ref := storyTokens(t, e, base)

	allowed := []int32{}
	for _, w := range []string{" a", " e", " i", " o", " u", "a", "e"} {
		ids, err := e.Tokenize(w, false)
		if err != nil {
			t.Fatal(err)
		}
		allowed = append(allowed, ids...)
	}
	proc := &vowelsOnly{mask: NewMask(e.VocabSize(), allowed...)}
	masked := base
	masked.Processors = []Processor{proc}
	_, out := storyTokens(t, e, masked)
	for _, tok := range out {
		if !slices.Contains(allowed, tok) {
			t.Fatalf("token %d is not allowed (allowed %v)", tok, allowed)
		}
	}
	if !slices.Equal(proc.accepted, out) {
		t.Errorf("the processor was told %v, the output is %v", proc.accepted, out)
	}

	opt.Speculative = &SpeculativeConfig{Proposer: &replay{ref: append(slices.Clone(prompt), ref...)}, NumSpeculativeTokens: 4, DisableDynamic: true}
	spec, err := Open(p, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer spec.Close()
	if _, got := storyTokens(t, spec, base); !slices.Equal(got, ref) {
		t.Errorf("with drafts %v, without %v", got, ref)
	}
	if st := spec.Stats(); st.DraftTokens == 0 || st.AcceptedDrafts == 0 || st.AcceptedDrafts == st.DraftTokens {
		t.Errorf("drafts: %d of %d kept; want some kept and some not", st.AcceptedDrafts, st.DraftTokens)
	}
}
