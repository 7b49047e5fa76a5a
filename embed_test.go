package kvasir

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/encoder"
)

func openTestEmbedder(t *testing.T, opt EmbedderOptions) *Embedder {
	t.Helper()
	c, _ := encoder.SynthConfig("bert-tiny")
	path := filepath.Join(t.TempDir(), "bert-tiny.gguf")
	if err := encoder.WriteSynth(path, "bert-tiny", c, 9); err != nil {
		t.Fatal(err)
	}
	if !IsEncoderModel(path) {
		t.Fatal("IsEncoderModel: false for a bert GGUF")
	}
	opt.Threads = 2
	e, err := OpenEmbedder(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestEmbedderBatching: calls made at once (batched by the batcher, in pieces when they
// pass MaxBatchTokens) get the embeddings each gets alone.
func TestEmbedderBatching(t *testing.T) {
	e := openTestEmbedder(t, EmbedderOptions{MaxBatchTokens: 40})
	texts := []string{"hello world", "the quick brown fox jumps over the lazy dog", "paris", "a city on a river", "hello"}
	var alone [][]float32
	for _, text := range texts {
		ids, err := e.Tokenize(text)
		if err != nil {
			t.Fatal(err)
		}
		v, err := e.Embed(context.Background(), []EmbedInput{{Tokens: ids}})
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, v[0])
	}
	// One call of every text at once: more tokens than a forward takes, run in pieces.
	var all []EmbedInput
	for _, text := range texts {
		ids, _ := e.Tokenize(text)
		all = append(all, EmbedInput{Tokens: ids})
	}
	whole, err := e.Embed(context.Background(), append(all, all...))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range whole {
		for j, x := range v {
			if math.Abs(float64(x-alone[i%len(texts)][j])) > 1e-5 {
				t.Fatalf("input %d of one call, value %d: %v, alone %v", i, j, x, alone[i%len(texts)][j])
			}
		}
	}
	var wg sync.WaitGroup
	got := make([][]float32, len(texts)*8)
	errs := make([]error, len(got))
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids, _ := e.Tokenize(texts[i%len(texts)])
			v, err := e.Embed(context.Background(), []EmbedInput{{Tokens: ids}})
			if err == nil {
				got[i] = v[0]
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		for j, x := range got[i] {
			if math.Abs(float64(x-alone[i%len(texts)][j])) > 1e-5 {
				t.Fatalf("call %d value %d: %v batched, %v alone", i, j, x, alone[i%len(texts)][j])
			}
		}
	}
}

func TestEmbedderRefuses(t *testing.T) {
	e := openTestEmbedder(t, EmbedderOptions{Pooling: "mean"})
	if e.Pooling() != "mean" || e.HasClassifier() {
		t.Errorf("pooling %s, classifier %v", e.Pooling(), e.HasClassifier())
	}
	long := make([]int32, e.MaxLen()+1)
	if _, err := e.Embed(context.Background(), []EmbedInput{{Tokens: long}}); !errors.Is(err, ErrTooLong) {
		t.Errorf("too long: %v", err)
	}
	for _, in := range [][]EmbedInput{nil, {{}}, {{Tokens: []int32{-1}}}, {{Tokens: []int32{int32(e.VocabSize())}}}} {
		if _, err := e.Embed(context.Background(), in); err == nil {
			t.Errorf("Embed(%v) succeeded", in)
		}
	}
	if _, err := e.Score(context.Background(), []EmbedInput{{Tokens: []int32{2, 3}}}); err == nil {
		t.Error("Score on a model without a head succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Embed(ctx, []EmbedInput{{Tokens: []int32{2, 3}}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if _, err := OpenEmbedder(filepath.Join(t.TempDir(), "none.gguf"), EmbedderOptions{}); err == nil {
		t.Error("a missing file opened")
	}
	if _, err := OpenEmbedder("x", EmbedderOptions{Pooling: "max"}); err == nil {
		t.Error("pooling max accepted")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Embed(context.Background(), []EmbedInput{{Tokens: []int32{2, 3}}}); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}
