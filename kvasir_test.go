package kvasir

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

func TestOpenGenerate(t *testing.T) {
	p := testdata.Path(t, "models/stories260K/stories260K.bin")
	e, err := Open(p, Options{Tokenizer: testdata.Path(t, "models/stories260K/tok512.bin"), Threads: 2, KVCacheMemory: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	t.Log(e.KVCacheSizing())
	ch, err := e.Generate(context.Background(), Request{Prompt: "Once upon a time", Params: SamplingParams{MaxTokens: 30, N: 2}})
	if err != nil {
		t.Fatal(err)
	}
	texts := make([]string, 2)
	var last Output
	for o := range ch {
		texts[o.Index] += o.Text
		last = o
	}
	if texts[0] == "" || texts[0] != texts[1] {
		t.Errorf("greedy choices differ or are empty: %q", texts)
	}
	if !strings.Contains(texts[0], "Lily") {
		t.Errorf("unexpected story %q", texts[0])
	}
	if last.Usage.CompletionTokens != 60 || last.Usage.PromptTokens < 5 {
		t.Errorf("usage %+v", last.Usage)
	}
	_, err = e.Generate(context.Background(), Request{Prompt: "x", Params: SamplingParams{MaxTokens: 100000}})
	if !errors.Is(err, ErrTooLong) {
		t.Errorf("huge max_tokens: %v", err)
	}
	ids, _ := e.Tokenize("Once upon", true)
	if s, _ := e.Detokenize(ids, true); s != "Once upon" {
		t.Errorf("round trip %q", s)
	}
}

// TestOpenF16Cache: an F16 KV cache holds twice the blocks of an F32 one in the same
// memory and tells the same greedy story; an unknown cache type is refused.
func TestOpenF16Cache(t *testing.T) {
	p := testdata.Path(t, "models/stories260K/stories260K.bin")
	tok := testdata.Path(t, "models/stories260K/tok512.bin")
	var blocks []int
	var stories []string
	for _, dt := range []KVCacheDType{KVCacheAuto, KVCacheF16} {
		e, err := Open(p, Options{Tokenizer: tok, Threads: 2, KVCacheMemory: 4 << 20, KVCacheDType: dt})
		if err != nil {
			t.Fatal(err)
		}
		t.Log(e.KVCacheSizing())
		blocks = append(blocks, e.sizing.NumBlocks)
		ch, err := e.Generate(context.Background(), Request{Prompt: "Once upon a time", Params: SamplingParams{MaxTokens: 60}})
		if err != nil {
			t.Fatal(err)
		}
		var text string
		for o := range ch {
			text += o.Text
		}
		stories = append(stories, text)
		e.Close()
	}
	if blocks[1] != 2*blocks[0] && blocks[1] != 2*blocks[0]+1 { // whole blocks of the same bytes
		t.Errorf("f16 cache: %d blocks in 4 MiB, want twice the f32 cache's %d", blocks[1], blocks[0])
	}
	if stories[0] == "" || stories[0] != stories[1] {
		t.Errorf("f16 cache tells %q, f32 %q", stories[1], stories[0])
	}
	if _, err := ParseKVCacheDType("fp4"); err == nil {
		t.Error("an fp4 cache accepted")
	}
	if _, err := Open(p, Options{Tokenizer: tok, Threads: 1, KVCacheDType: KVCacheInt8 + 1}); err == nil {
		t.Error("an unknown cache type accepted")
	}
}

func TestKVBudget(t *testing.T) {
	const gib = int64(1) << 30
	cases := []struct {
		free, total, own int64
		util             float64
		want             int64
		wantErr          bool
	}{
		// One process: its weights (15 GiB) and the context's overhead (1 GiB) in use.
		{free: 124 * gib, total: 140 * gib, own: 15 * gib, util: 0.9, want: int64(0.9*float64(140*gib)) - 15*gib - activationReserve},
		{free: 124 * gib, total: 140 * gib, own: 15 * gib, util: 0, want: int64(DefaultGPUMemoryUtilization*float64(140*gib)) - 15*gib - activationReserve},
		// The second of two processes at 0.45: the first's 63 GiB do not count against its share.
		{free: 62 * gib, total: 140 * gib, own: 15 * gib, util: 0.45, want: int64(0.45*float64(140*gib)) - 15*gib - activationReserve},
		// A share larger than what is free gets what is free.
		{free: 30 * gib, total: 140 * gib, own: 15 * gib, util: 0.9, want: 30*gib - activationReserve},
		{free: 10 * gib, total: 140 * gib, own: 62 * gib, util: 0.45, wantErr: true}, // weights took more than the share
		{free: 1 * gib, total: 140 * gib, own: 15 * gib, util: 0.45, wantErr: true},  // others took the device
		{free: 124 * gib, total: 140 * gib, util: 1.5, wantErr: true},
		{free: 124 * gib, total: 140 * gib, util: -0.1, wantErr: true},
	}
	for _, c := range cases {
		got, err := kvBudget(c.free, c.total, c.own, c.util)
		if (err != nil) != c.wantErr || (!c.wantErr && got != c.want) {
			t.Errorf("kvBudget(%d, %d, %d, %g) = %d, %v; want %d (error %v)", c.free, c.total, c.own, c.util, got, err, c.want, c.wantErr)
		}
	}
}

// TestOpenSplit: stories260K split by tensor and pipeline across CPU ranks tells the same
// greedy story as the whole model, sizes each rank's cache part by its share of the KV
// heads, and a split the shape does not allow is refused.
func TestOpenSplit(t *testing.T) {
	p := testdata.Path(t, "models/stories260K/stories260K.bin")
	tok := testdata.Path(t, "models/stories260K/tok512.bin")
	story := func(opt Options) (string, string) {
		opt.Tokenizer, opt.Threads, opt.KVCacheMemory = tok, 2, 4<<20
		e, err := Open(p, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		ch, err := e.Generate(context.Background(), Request{Prompt: "Once upon a time", Params: SamplingParams{MaxTokens: 40}})
		if err != nil {
			t.Fatal(err)
		}
		var text string
		for o := range ch {
			text += o.Text
		}
		return text, e.KVCacheSizing()
	}
	want, wholeSizing := story(Options{})
	if !strings.Contains(want, "Lily") {
		t.Fatalf("unexpected story %q", want)
	}
	got, sizing := story(Options{TensorParallel: 2, PipelineParallel: 2})
	if got != want {
		t.Errorf("split story %q, whole model's %q", got, want)
	}
	if !strings.Contains(sizing, "on each of 4 ranks") || sizing == wholeSizing {
		t.Errorf("sizing of the split cache: %q (whole: %q)", sizing, wholeSizing)
	}
	if _, err := Open(p, Options{Tokenizer: tok, TensorParallel: 3}); err == nil || !strings.Contains(err.Error(), "heads") {
		t.Errorf("tensor-parallel 3 over 8 heads: %v", err)
	}
}

// TestQuantizedCacheRefusesMassPolicies: h2o and snapkv compact the cache token by token,
// which a quantized cache's layout does not support: a request naming one gets an error
// that says so, and the server-wide policy is refused at Open.
func TestQuantizedCacheRefusesMassPolicies(t *testing.T) {
	p := testdata.Path(t, "models/stories260K/stories260K.bin")
	tok := testdata.Path(t, "models/stories260K/tok512.bin")
	e, err := Open(p, Options{Tokenizer: tok, Threads: 1, KVCacheMemory: 4 << 20, KVCacheDType: KVCacheInt8})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, name := range []string{"h2o", "snapkv"} {
		spec, err := ParseKVPolicy(name + ":budget_tokens=64")
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Generate(t.Context(), Request{Prompt: "Once", KVPolicy: &spec, Params: SamplingParams{MaxTokens: 4}})
		if err == nil || !strings.Contains(err.Error(), "quantized cache") {
			t.Errorf("%s over an int8 cache: error %v, want one naming the quantized cache", name, err)
		}
	}
	spec, _ := ParseKVPolicy("h2o:budget_tokens=64")
	if e2, err := Open(p, Options{Tokenizer: tok, Threads: 1, KVCacheMemory: 4 << 20, KVCacheDType: KVCacheFP8E4M3, KVPolicy: spec}); err == nil {
		e2.Close()
		t.Error("Open with h2o over an fp8 cache succeeded")
	}
}
