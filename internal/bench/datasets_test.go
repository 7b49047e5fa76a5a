package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// storiesTokenizer is the real 512-token SentencePiece vocabulary of stories260K.
func storiesTokenizer(t *testing.T) Tokenizer {
	t.Helper()
	v, err := format.LoadVocab(testdata.Path(t, "models/stories260K/tok512.bin"), 0)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	return FromTokenizer(tok)
}

// llama3Tokenizer is Llama 3's byte-level BPE vocabulary.
func llama3Tokenizer(t *testing.T) Tokenizer {
	t.Helper()
	v, err := tokenizer.VocabFromLlama3Files(testdata.Path(t, "tokenizers/llama3/encoder.json"), testdata.Path(t, "tokenizers/llama3/vocab.bpe"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	return FromTokenizer(tok)
}

func wordBuilder(t *testing.T) *PromptBuilder {
	t.Helper()
	b, err := NewPromptBuilder(context.Background(), nil, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRandomDataset(t *testing.T) {
	tok := storiesTokenizer(t)
	ctx := context.Background()
	ids, err := NewPromptBuilder(ctx, tok, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	c := DatasetConfig{Name: DatasetRandom, NumPrompts: 200, RandomInputLen: 40, RandomOutputLen: 10, RandomRangeRatio: 0.5, RandomPrefixLen: 8, Seed: 3}
	reqs, err := LoadDataset(ctx, c, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 200 {
		t.Fatalf("%d requests", len(reqs))
	}
	lens := map[int]bool{}
	for _, r := range reqs {
		in := len(r.TokenIDs) - 8
		if in < 20 || in > 60 || r.OutputLen < 5 || r.OutputLen > 15 || r.PromptLen != len(r.TokenIDs) {
			t.Fatalf("input %d, output %d, prompt len %d: outside the range", in, r.OutputLen, r.PromptLen)
		}
		if !slices.Equal(r.TokenIDs[:8], reqs[0].TokenIDs[:8]) {
			t.Fatal("the random prefix is not shared")
		}
		for _, id := range r.TokenIDs {
			if tok.IsSpecial(id) || id >= tok.NumTokens() {
				t.Fatalf("token %d is special or out of the vocabulary", id)
			}
		}
		lens[in] = true
	}
	if len(lens) < 20 {
		t.Errorf("only %d distinct input lengths over [20, 60]", len(lens))
	}
	again, _ := LoadDataset(ctx, c, ids)
	if !slices.Equal(again[7].TokenIDs, reqs[7].TokenIDs) {
		t.Error("the same seed must give the same prompts")
	}

	// On the chat endpoint the same tokens go as text whose length the tokenizer measures.
	text, err := NewPromptBuilder(ctx, tok, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	c.RandomRangeRatio, c.RandomPrefixLen, c.NumPrompts = 0, 0, 20
	reqs, err = LoadDataset(ctx, c, text)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if r.TokenIDs != nil || r.Prompt == "" || r.PromptLen < 30 || r.PromptLen > 50 {
			t.Errorf("text prompt %q: %d tokens, want about 40", r.Prompt, r.PromptLen)
		}
	}
	if _, err := LoadDataset(ctx, DatasetConfig{Name: DatasetRandom, NumPrompts: 1, RandomInputLen: 4, RandomOutputLen: 4, RandomRangeRatio: 1}, text); err == nil {
		t.Error("range ratio 1 accepted")
	}
	if _, err := LoadDataset(ctx, DatasetConfig{Name: "nope", NumPrompts: 1}, text); err == nil {
		t.Error("unknown dataset accepted")
	}
}

func TestWordPrompts(t *testing.T) {
	reqs, err := LoadDataset(context.Background(), DatasetConfig{Name: DatasetRandom, NumPrompts: 3, RandomInputLen: 25, RandomOutputLen: 5}, wordBuilder(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if n := len(strings.Fields(r.Prompt)); n != 25 || r.PromptLen != 25 || r.TokenIDs != nil {
			t.Errorf("prompt of %d words, length %d: %q", n, r.PromptLen, r.Prompt)
		}
	}
}

func TestShareGPTDataset(t *testing.T) {
	ctx := context.Background()
	tok := storiesTokenizer(t)
	b, err := NewPromptBuilder(ctx, tok, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	// First turns only: the output length is the default.
	c := DatasetConfig{Name: DatasetShareGPT, Path: testdata.Path(t, "workloads/sharegpt_v3_filtered_500.json"), NumPrompts: 50, Seed: 1}
	reqs, err := LoadDataset(ctx, c, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 50 {
		t.Fatalf("%d requests", len(reqs))
	}
	for _, r := range reqs {
		if r.Prompt == "" || r.TokenIDs != nil || r.OutputLen != DefaultShareGPTOutputLen || r.PromptLen != len(tok.Encode(r.Prompt)) {
			t.Fatalf("request %+v", r)
		}
	}
	// With replies: the output length is the reply's token count (counted by Llama 3's
	// tokenizer, under which these prompts fit vLLM's filter); 700 asked of 50 repeat.
	b, err = NewPromptBuilder(ctx, llama3Tokenizer(t), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	c = DatasetConfig{Name: DatasetShareGPT, Path: testdata.Path(t, "workloads/sharegpt_sample50.json"), NumPrompts: 700, Seed: 1}
	reqs, err = LoadDataset(ctx, c, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 700 {
		t.Fatalf("%d requests", len(reqs))
	}
	outs := map[int]bool{}
	for _, r := range reqs {
		if r.PromptLen < 4 || r.OutputLen < 4 || r.PromptLen > 1024 || r.PromptLen+r.OutputLen > 2048 {
			t.Errorf("request outside vLLM's filter: %d in, %d out", r.PromptLen, r.OutputLen)
		}
		outs[r.OutputLen] = true
	}
	if len(outs) < 10 {
		t.Errorf("only %d distinct reply lengths", len(outs))
	}
	c.ShareGPTOutputLen = 17
	reqs, _ = LoadDataset(ctx, c, b)
	if reqs[0].OutputLen != 17 {
		t.Errorf("--sharegpt-output-len ignored: %d", reqs[0].OutputLen)
	}
	if _, err := LoadDataset(ctx, DatasetConfig{Name: DatasetShareGPT, Path: testdata.Path(t, "workloads/mooncake_synthetic_trace.jsonl"), NumPrompts: 1}, b); err == nil {
		t.Error("a JSONL trace read as ShareGPT")
	}
}

func TestPrefixRepetitionDataset(t *testing.T) {
	c := DatasetConfig{Name: DatasetPrefixRepetition, NumPrompts: 40, PrefixLen: 12, SuffixLen: 5, NumPrefixes: 4, PrefixOut: 9, Seed: 2}
	tok := storiesTokenizer(t)
	b, err := NewPromptBuilder(context.Background(), tok, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := LoadDataset(context.Background(), c, b)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range reqs {
		if len(r.TokenIDs) != 17 || r.OutputLen != 9 {
			t.Fatalf("prompt of %d tokens, output %d", len(r.TokenIDs), r.OutputLen)
		}
		count[fmt.Sprint(r.TokenIDs[:12])]++
	}
	if len(count) != 4 {
		t.Errorf("%d distinct prefixes, want 4", len(count))
	}
	for p, n := range count {
		if n != 10 {
			t.Errorf("prefix %s used %d times, want 10", p, n)
		}
	}
}

func TestMooncakeDataset(t *testing.T) {
	path := testdata.Path(t, "workloads/mooncake_synthetic_trace.jsonl")
	entries, err := ReadMooncake(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3993 || entries[0].InputLength != 40160 || len(entries[0].HashIDs) != 79 {
		t.Fatalf("%d entries, first %+v", len(entries), entries[0])
	}
	tok := storiesTokenizer(t)
	b, err := NewPromptBuilder(context.Background(), tok, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	const block = 16
	c := DatasetConfig{Name: DatasetMooncake, Path: path, NumPrompts: 300, MooncakeBlockSize: block, MooncakeTimeScale: 0.5, Seed: 1}
	if !c.Timed() {
		t.Error("mooncake must replay its timestamps")
	}
	reqs, err := LoadDataset(context.Background(), c, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 300 {
		t.Fatalf("%d requests", len(reqs))
	}
	shared := 0
	for i, r := range reqs {
		e := entries[i]
		if want := (e.InputLength*block + 511) / 512; len(r.TokenIDs) != want {
			t.Fatalf("request %d: %d tokens, want %d", i, len(r.TokenIDs), want)
		}
		if r.OutputLen != max(1, e.OutputLength) {
			t.Errorf("request %d: output %d, want %d", i, r.OutputLen, e.OutputLength)
		}
		if want := time.Duration((e.Timestamp - entries[0].Timestamp) * 0.5 * float64(time.Millisecond)); r.Arrival != want {
			t.Errorf("request %d: arrival %v, want %v", i, r.Arrival, want)
		}
		// Requests with the same leading hash ids have the same leading tokens, and
		// different hash ids give different blocks.
		for j := range i {
			f := entries[j]
			k := 0
			for k < len(e.HashIDs) && k < len(f.HashIDs) && e.HashIDs[k] == f.HashIDs[k] {
				k++
			}
			n := min(k*block, len(r.TokenIDs), len(reqs[j].TokenIDs))
			if !slices.Equal(r.TokenIDs[:n], reqs[j].TokenIDs[:n]) {
				t.Fatalf("requests %d and %d share %d hash ids but not their first %d tokens", j, i, k, n)
			}
			if k > 0 {
				shared++
			}
			if k == 0 && len(e.HashIDs) > 0 && len(f.HashIDs) > 0 && slices.Equal(r.TokenIDs[:block], reqs[j].TokenIDs[:block]) {
				t.Fatalf("requests %d and %d have different first hash ids but the same first block", j, i)
			}
		}
	}
	if shared == 0 {
		t.Error("no two requests share a prefix; the trace has many")
	}
	c.MooncakeMaxOutput, c.NumPrompts = 50, 40
	capped, err := LoadDataset(context.Background(), c, b)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range capped {
		if want := min(max(1, entries[i].OutputLength), 50); r.OutputLen != want {
			t.Errorf("capped request %d: output %d, want %d", i, r.OutputLen, want)
		}
	}
}
