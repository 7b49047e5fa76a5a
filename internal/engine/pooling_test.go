package engine

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/model"
)

// refEmbedding is a prompt's embedding computed apart from the engine: one forward of the
// whole prompt alone over a fresh cache, every row's final hidden state read back, pooled
// in float64.
func refEmbedding(t *testing.T, tm *tinyModel, prompt []int32, pooling string) []float32 {
	t.Helper()
	const bs = 16
	nb := (len(prompt) + bs - 1) / bs
	kv, err := tm.m.NewKVCache(nb+1, bs)
	if err != nil {
		t.Fatal(err)
	}
	pm := &pagedModel{m: tm.m, kv: kv}
	table := make([]int32, nb)
	for i := range table {
		table[i] = int32(i + 1)
	}
	b := &model.Batch{Seqs: []model.Seq{{BlockTable: table, QueryLen: len(prompt), ContextLen: len(prompt)}}}
	for i, tok := range prompt {
		b.Tokens = append(b.Tokens, tok)
		b.Positions = append(b.Positions, int32(i))
		b.SlotMapping = append(b.SlotMapping, table[i/bs]*bs+int32(i%bs))
		b.LogitsIndices = append(b.LogitsIndices, i)
	}
	h, err := pm.ForwardHidden(b)
	if err != nil {
		t.Fatal(err)
	}
	dim := pm.HiddenDim()
	out := make([]float32, dim)
	if pooling == PoolLast {
		copy(out, h[(len(prompt)-1)*dim:])
		return out
	}
	for i := range dim {
		var s float64
		for p := range prompt {
			s += float64(h[p*dim+i])
		}
		out[i] = float32(s / float64(len(prompt)))
	}
	return out
}

// embedResult is one pooling request's outcome.
type embedResult struct {
	vec    []float32
	usage  Usage
	finish string
	err    error
}

// embedAll submits the prompts at once (GenerateAll) and collects each embedding.
func embedAll(t *testing.T, e *Engine, prompts [][]int32) []embedResult {
	t.Helper()
	reqs := make([]Request, len(prompts))
	for i, p := range prompts {
		reqs[i] = Request{PromptTokens: p}
	}
	chans, err := e.GenerateAll(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]embedResult, len(prompts))
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = readEmbedding(ch)
		}()
	}
	wg.Wait()
	for i, r := range out {
		if r.err != nil || r.finish != FinishStop || len(r.vec) == 0 {
			t.Fatalf("input %d: finish %q, %d values, error %v", i, r.finish, len(r.vec), r.err)
		}
	}
	return out
}

func readEmbedding(ch <-chan Output) embedResult {
	var r embedResult
	timeout := time.After(60 * time.Second)
	for {
		select {
		case o, ok := <-ch:
			if !ok {
				return r
			}
			if len(o.TokenIDs) > 0 {
				r.err = errors.New("a pooling request generated tokens")
			}
			if o.Err != nil {
				r.err = o.Err
			}
			if o.Embedding != nil {
				r.vec = o.Embedding
			}
			r.finish, r.usage = o.FinishReason, o.Usage
		case <-timeout:
			return embedResult{err: errors.New("timed out")}
		}
	}
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// sharedPrefixPrompts are n prompts of a shared prefix of prefix tokens and suffixes of
// 3..(3+n) tokens, in a vocabulary of vocab.
func sharedPrefixPrompts(n, prefix, vocab int) [][]int32 {
	head := randomPrompt(99, prefix, vocab)
	out := make([][]int32, n)
	for i := range out {
		out[i] = append(append([]int32{}, head...), randomPrompt(i+1, 3+i, vocab)...)
	}
	return out
}

// TestPoolingEngineMatchesReference: a pooling engine's embeddings of prompts sharing a
// 100-token prefix, submitted together under a 256-token budget (chunked), with prefix
// caching on and off, under both schedules, equal each prompt's own forward alone (cosine
// >= 0.99999, last-token and mean pooling). With prefix caching, last-token pooling takes
// the prefix from the cache for all prompts but the first (CachedPromptTokens counts it),
// although they arrived at once, and mean pooling never does. No
// block is held afterwards and the manager's invariants hold after every step.
func TestPoolingEngineMatchesReference(t *testing.T) {
	tm := newTinyModel(t)
	prompts := sharedPrefixPrompts(10, 100, tm.fm.Config.VocabSize)
	for _, pooling := range []string{PoolLast, PoolMean} {
		want := make([][]float32, len(prompts))
		for i, p := range prompts {
			want[i] = refEmbedding(t, tm, p, pooling)
		}
		forEachMode(t, func(t *testing.T, serial bool) {
			for _, noPrefix := range []bool{false, true} {
				var mu sync.Mutex
				var broken error
				e := tm.engineWithHook(t, Config{Pooling: pooling, DisableAsyncScheduling: serial, DisablePrefixCaching: noPrefix,
					SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 256}}, func(e *Engine) {
					mu.Lock()
					defer mu.Unlock()
					if broken == nil {
						broken = checkEngine(e)
					}
				})
				// All submitted together: the first computes the prefix, the others wait a
				// step for it (last-token pooling) rather than computing it too.
				got := embedAll(t, e, prompts)
				cached := 0
				for i, r := range got {
					if c := cosine(r.vec, want[i]); c < 0.99999 {
						t.Errorf("%s, prefix caching off %v: input %d: cosine %.7f to its forward alone", pooling, noPrefix, i, c)
					}
					if r.usage.PromptTokens != len(prompts[i]) || r.usage.CompletionTokens != 0 {
						t.Errorf("input %d: usage %+v", i, r.usage)
					}
					cached += r.usage.CachedPromptTokens
				}
				switch {
				case noPrefix || pooling == PoolMean:
					if cached != 0 {
						t.Errorf("%s, prefix caching off %v: %d prompt tokens from the prefix cache", pooling, noPrefix, cached)
					}
				case cached < (len(prompts)-1)*96: // six blocks of the prefix each
					t.Errorf("last-token pooling with prefix caching took only %d prompt tokens from the cache", cached)
				}
				waitIdle(t, e)
				mu.Lock()
				if broken != nil {
					t.Error(broken)
				}
				mu.Unlock()
				if err := e.kv.Check(); err != nil || e.kv.NumFreeBlocks() != e.cfg.NumBlocks-1 {
					t.Errorf("after the requests: %v, %d of %d blocks free", err, e.kv.NumFreeBlocks(), e.cfg.NumBlocks-1)
				}
			}
		})
	}
}

// TestPoolingEnginePreemption: in a pool too small for the prompts together, sequences
// are preempted and recomputed (asynchronous scheduling), and every embedding still equals its prompt's forward
// alone (a mean-pooling row computed again is not summed twice).
func TestPoolingEnginePreemption(t *testing.T) {
	tm := newTinyModel(t)
	prompts := sharedPrefixPrompts(8, 60, tm.fm.Config.VocabSize)
	for i := range prompts {
		prompts[i] = append(prompts[i], randomPrompt(50+i, 40, tm.fm.Config.VocabSize)...) // no two alike past the prefix
	}
	for _, pooling := range []string{PoolLast, PoolMean} {
		forEachMode(t, func(t *testing.T, serial bool) {
			e := tm.engine(t, Config{Pooling: pooling, NumBlocks: 11, DisableAsyncScheduling: serial,
				SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 64}})
			got := embedAll(t, e, prompts)
			for i, r := range got {
				if c := cosine(r.vec, refEmbedding(t, tm, prompts[i], pooling)); c < 0.99999 {
					t.Errorf("%s: input %d: cosine %.7f to its forward alone", pooling, i, c)
				}
			}
			waitIdle(t, e)
			// Under the serial schedule a finished prompt's blocks are free before the
			// next plan, and prompts alone never outgrow the pool: only the asynchronous
			// one, which plans while the finishing prompt still holds them, preempts.
			if st := e.Stats(); st.Preemptions == 0 && !serial {
				t.Errorf("%s: no preemption in a pool of 10 blocks for %d prompts: the test shows nothing", pooling, len(prompts))
			}
		})
	}
}

// TestPoolingEngineAbort: a pooling request whose caller goes away mid-prefill (its
// context cancelled) frees its blocks, and the engine serves the next request; many
// requests leave no block held.
func TestPoolingEngineAbort(t *testing.T) {
	tm := newTinyModel(t)
	e := tm.engine(t, Config{Pooling: PoolLast, SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 16}})
	long := randomPrompt(7, 900, tm.fm.Config.VocabSize)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Generate(ctx, Request{PromptTokens: long})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().UsedBlocks == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	for range ch {
	}
	waitIdle(t, e)
	for round := range 5 {
		embedAll(t, e, sharedPrefixPrompts(12, 40+round, tm.fm.Config.VocabSize))
	}
	waitIdle(t, e)
	if err := e.kv.Check(); err != nil || e.kv.NumFreeBlocks() != e.cfg.NumBlocks-1 {
		t.Errorf("after the requests: %v, %d of %d blocks free", err, e.kv.NumFreeBlocks(), e.cfg.NumBlocks-1)
	}
}

// TestPoolingEngineRefusals: what a pooling engine or request cannot take is refused with
// the reason.
func TestPoolingEngineRefusals(t *testing.T) {
	tm := newTinyModel(t)
	if _, err := New(tm.m, tm.tok, Config{NumBlocks: 64, Pooling: "cls"}); err == nil {
		t.Error("pooling cls was taken by a decoder engine")
	}
	e := tm.engine(t, Config{Pooling: PoolMean, NumBlocks: 9, BlockSize: 16})
	p := randomPrompt(3, 10, tm.fm.Config.VocabSize)
	var pe *ParamError
	for param, req := range map[string]Request{
		"n":               {PromptTokens: p, Params: SamplingParams{N: 2}},
		"use_beam_search": {PromptTokens: p, Params: SamplingParams{UseBeamSearch: true}},
		"prompt_logprobs": {PromptTokens: p, Params: SamplingParams{PromptLogprobs: true}},
		"kv_policy":       {PromptTokens: p, KVPolicy: &kvcache.PolicySpec{Name: kvcache.PolicyStreaming, BudgetTokens: 64}},
	} {
		if _, err := e.Generate(context.Background(), req); !errors.As(err, &pe) || pe.Param != param {
			t.Errorf("%s: %v, want a parameter error naming it", param, err)
		}
	}
	if _, err := e.Generate(context.Background(), Request{PromptTokens: randomPrompt(3, 8*16+1, tm.fm.Config.VocabSize)}); !errors.Is(err, ErrTooLong) {
		t.Errorf("an input longer than the pool: %v, want ErrTooLong", err)
	}
	// The whole pool's worth is taken: nothing follows an embedding's prompt.
	if got := embedAll(t, e, [][]int32{randomPrompt(3, 8*16, tm.fm.Config.VocabSize)}); len(got[0].vec) != tm.fm.Config.Dim {
		t.Errorf("embedding of %d values, want %d", len(got[0].vec), tm.fm.Config.Dim)
	}
}
