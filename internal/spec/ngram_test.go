package spec

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestNGramPropose(t *testing.T) {
	for _, tc := range []struct {
		name     string
		g        NGram
		tokens   []int32
		max      int
		want     []int32
		wantNone bool
	}{
		{name: "bigram match", g: NGram{1, 3}, tokens: []int32{1, 2, 3, 4, 1, 2}, max: 2, want: []int32{3, 4}},
		{name: "capped by max", g: NGram{1, 3}, tokens: []int32{1, 2, 3, 4, 5, 1, 2}, max: 1, want: []int32{3}},
		{name: "capped by the sequence", g: NGram{1, 3}, tokens: []int32{7, 8, 9, 7, 8}, max: 5, want: []int32{9, 7, 8}},
		// The longest suffix wins over a later shorter one: "1 2 3" occurs at 0..2, only
		// "3" at 5; with Max 3 the 3-gram's continuation (9) is proposed.
		{name: "longest first", g: NGram{1, 3}, tokens: []int32{1, 2, 3, 9, 0, 3, 5, 1, 2, 3}, max: 1, want: []int32{9}},
		// Among equally long matches the latest wins.
		{name: "latest of equals", g: NGram{2, 2}, tokens: []int32{4, 5, 6, 4, 5, 7, 4, 5}, max: 1, want: []int32{7}},
		// With Max 1 the later unigram wins even though a longer match exists earlier.
		{name: "max bounds n", g: NGram{1, 1}, tokens: []int32{1, 2, 3, 9, 0, 3, 5, 1, 2, 3}, max: 1, want: []int32{5}},
		{name: "below min", g: NGram{3, 5}, tokens: []int32{1, 2, 9, 1, 2}, max: 3, wantNone: true},
		{name: "no earlier occurrence", g: NGram{1, 3}, tokens: []int32{1, 2, 3, 4}, max: 3, wantNone: true},
		// An occurrence may overlap the suffix (a repeated token).
		{name: "overlap", g: NGram{2, 4}, tokens: []int32{6, 6, 6, 6}, max: 3, want: []int32{6}},
		{name: "period two", g: NGram{2, 4}, tokens: []int32{1, 2, 1, 2, 1, 2}, max: 4, want: []int32{1, 2}},
		{name: "too short", g: NGram{1, 3}, tokens: []int32{5}, max: 3, wantNone: true},
		{name: "empty", g: NGram{1, 3}, tokens: nil, max: 3, wantNone: true},
		{name: "max zero", g: NGram{1, 3}, tokens: []int32{1, 2, 1}, max: 0, wantNone: true},
		{name: "min zero counts as one", g: NGram{0, 2}, tokens: []int32{3, 8, 3}, max: 1, want: []int32{8}},
		{name: "min above max", g: NGram{4, 2}, tokens: []int32{1, 2, 1, 2}, max: 1, wantNone: true},
	} {
		got := tc.g.Propose(tc.tokens, tc.max)
		if tc.wantNone {
			if got != nil {
				t.Errorf("%s: %v, want none", tc.name, got)
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestNGramCopies: the proposal does not alias the sequence, which the engine goes on
// appending to.
func TestNGramCopies(t *testing.T) {
	tokens := []int32{1, 2, 3, 1, 2}
	got := NGram{1, 2}.Propose(tokens, 2)
	got[0] = 99
	if tokens[2] != 3 {
		t.Fatal("the proposal aliases the sequence")
	}
}

// naiveNGram is the definition: for n from Max down to Min, the latest earlier occurrence
// of the last n tokens, and what followed it.
func naiveNGram(g NGram, tokens []int32, most int) []int32 {
	if most <= 0 {
		return nil
	}
	for n := g.Max; n >= max(g.Min, 1); n-- {
		if n >= len(tokens) {
			continue
		}
		suffix := tokens[len(tokens)-n:]
		for start := len(tokens) - n - 1; start >= 0; start-- {
			if slices.Equal(tokens[start:start+n], suffix) {
				end := min(start+n+most, len(tokens))
				return slices.Clone(tokens[start+n : end])
			}
		}
	}
	return nil
}

// TestNGramMatchesDefinition compares the one-scan search with the definition on random
// sequences over small vocabularies (many matches of every length).
func TestNGramMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		vocab := 1 + rng.IntN(4)
		tokens := make([]int32, rng.IntN(40))
		for i := range tokens {
			tokens[i] = int32(rng.IntN(vocab))
		}
		lo := rng.IntN(4)
		g := NGram{Min: lo, Max: lo + rng.IntN(5)}
		most := rng.IntN(6)
		got, want := g.Propose(tokens, most), naiveNGram(g, tokens, most)
		if !slices.Equal(got, want) {
			t.Fatalf("%+v on %v, max %d: %v, want %v", g, tokens, most, got, want)
		}
	}
}

// FuzzNGram: the scan agrees with the definition on any input, and never proposes more
// than asked.
func FuzzNGram(f *testing.F) {
	f.Add([]byte{1, 2, 3, 1, 2}, uint8(1), uint8(3), uint8(2))
	f.Add([]byte{0, 0, 0, 0}, uint8(2), uint8(2), uint8(8))
	f.Fuzz(func(t *testing.T, data []byte, lo, span, most uint8) {
		tokens := make([]int32, len(data))
		for i, b := range data {
			tokens[i] = int32(b % 8)
		}
		g := NGram{Min: int(lo % 8), Max: int(lo%8) + int(span%8)}
		got := g.Propose(tokens, int(most%20))
		if len(got) > int(most%20) {
			t.Fatalf("%d tokens proposed, %d asked", len(got), most%20)
		}
		if want := naiveNGram(g, tokens, int(most%20)); !slices.Equal(got, want) {
			t.Fatalf("%+v on %v: %v, want %v", g, tokens, got, want)
		}
	})
}

// BenchmarkNGram times one proposal on a 4,096-token context with vLLM's default lengths
// (5..5) and a wide range (1..16), K = 4: on text (a 32,000-token vocabulary, few matches),
// on a small vocabulary (many partial matches), and on a repetitive sequence (an early
// full match). A decode step of the smallest real model served (smollm2-135m Q8_0 on the
// CPU) takes milliseconds; a proposal takes microseconds (docs/BENCHMARKS.md).
func BenchmarkNGram(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 4096
	inputs := map[string][]int32{}
	text, small, loop := make([]int32, n), make([]int32, n), make([]int32, n)
	for i := range n {
		text[i] = int32(rng.IntN(32000))
		small[i] = int32(rng.IntN(4))
		loop[i] = int32(i % 50)
	}
	inputs["text"], inputs["vocab4"], inputs["repetitive"] = text, small, loop
	for _, g := range []NGram{{5, 5}, {1, 16}} {
		for _, name := range []string{"text", "vocab4", "repetitive"} {
			tokens := inputs[name]
			b.Run(fmt.Sprintf("%s/n%d-%d", name, g.Min, g.Max), func(b *testing.B) {
				for b.Loop() {
					g.Propose(tokens, 4)
				}
			})
		}
	}
}
