package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// tinyModel is a 2-layer synthesized smollm2 shape with a 256-token byte vocabulary.
type tinyModel struct {
	fm  *format.Model
	m   *model.Model
	tok *tokenizer.Tokenizer
	// engines are the engines made on m so far. One model serves one engine at a time:
	// a new engine closes them first, since an engine's loop may still run a step planned
	// ahead after its last request finished (async scheduling), which would race with the
	// new engine's steps on the model's buffers.
	engines []*Engine
}

// closeEngines closes the engines made on tm so far (see tinyModel.engines).
func (tm *tinyModel) closeEngines() {
	for _, e := range tm.engines {
		e.Close()
	}
	tm.engines = tm.engines[:0]
}

func newTinyModel(t testing.TB) *tinyModel { return tinyModelOf(t, quant.F32) }

// tinyModelOf is newTinyModel's shape with weights of type dt.
func tinyModelOf(t testing.TB, dt quant.Type) *tinyModel {
	t.Helper()
	shape, err := synth.Lookup("smollm2-135m")
	if err != nil {
		t.Fatal(err)
	}
	c := shape.Config
	c.Layers, c.VocabSize, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.RopeDim, c.FFNDim, c.ContextLen = 2, 320, 128, 4, 2, 32, 32, 256, 1024
	shape.Config = c
	fm, err := synth.Model(shape, dt, 7)
	if err != nil {
		t.Fatal(err)
	}
	return bindModel(t, fm, quant.F32)
}

// storiesModel is the real stories260K checkpoint.
func storiesModel(t testing.TB) *tinyModel { return openStoriesModel(t, quant.F32) }

// storiesF16Model is the stories260K checkpoint with an F16 KV cache.
func storiesF16Model(t testing.TB) *tinyModel { return openStoriesModel(t, quant.F16) }

// openStoriesModel binds the stories260K checkpoint with a KV cache of kvDType elements.
func openStoriesModel(t testing.TB, kvDType quant.Type) *tinyModel {
	t.Helper()
	p := testdata.Path(t, "models/stories260K/stories260K.bin")
	tp := testdata.Path(t, "models/stories260K/tok512.bin")
	fm, err := format.Open(p, format.Options{Tokenizer: tp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	return bindModel(t, fm, kvDType)
}

// bindModel binds fm on two threads, with a KV cache of kvDType elements.
func bindModel(t testing.TB, fm *format.Model, kvDType quant.Type) *tinyModel {
	m, err := model.New(fm, model.Options{Backends: cpuBackends(t, 2, model.Parallel{}), KVCacheDType: kvDType})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	tok, err := tokenizer.New(fm.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	return &tinyModel{fm: fm, m: m, tok: tok}
}

func (tm *tinyModel) engine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	if cfg.NumBlocks == 0 {
		cfg.NumBlocks = 257
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 16
	}
	tm.closeEngines()
	e, err := New(tm.m, tm.tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tm.engines = append(tm.engines, e)
	t.Cleanup(func() { e.Close() })
	return e
}

// schedulingModes are the two step orders the engine tests run under.
var schedulingModes = []struct {
	name   string
	serial bool // Config.DisableAsyncScheduling
}{{"async", false}, {"sync", true}}

// forEachMode runs f as a subtest under asynchronous and synchronous scheduling.
func forEachMode(t *testing.T, f func(t *testing.T, serial bool)) {
	for _, m := range schedulingModes {
		t.Run(m.name, func(t *testing.T) { f(t, m.serial) })
	}
}

// engineWithHook makes an engine whose afterStep hook is set before its loop starts.
func (tm *tinyModel) engineWithHook(t testing.TB, cfg Config, afterStep func(e *Engine)) *Engine {
	t.Helper()
	if cfg.NumBlocks == 0 {
		cfg.NumBlocks = 257
	}
	tm.closeEngines()
	e, err := build(tm.m, tm.tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tm.engines = append(tm.engines, e)
	e.afterStep = func() { afterStep(e) }
	go e.loop()
	t.Cleanup(func() { e.Close() })
	return e
}

// result is one choice's collected output.
type result struct {
	tokens []int32
	text   string
	finish string
	stop   any
	lps    []Logprob
	usage  Usage
}

// collect reads a request's stream to the end.
func collect(t testing.TB, ch <-chan Output, n int) []result {
	t.Helper()
	res := make([]result, n)
	timeout := time.After(60 * time.Second)
	for {
		select {
		case o, ok := <-ch:
			if !ok {
				for i, r := range res {
					if r.finish == "" {
						t.Errorf("choice %d ended without a finish reason", i)
					}
				}
				return res
			}
			if o.Err != nil {
				t.Errorf("output error: %v", o.Err)
			}
			if o.Index < 0 || o.Index >= n {
				t.Fatalf("output for choice %d of %d", o.Index, n)
			}
			r := &res[o.Index]
			if r.finish != "" {
				t.Errorf("choice %d: output after its finish", o.Index)
			}
			r.tokens = append(r.tokens, o.TokenIDs...)
			r.text += o.Text
			r.lps = append(r.lps, o.Logprobs...)
			r.finish, r.stop, r.usage = o.FinishReason, o.StopReason, o.Usage
		case <-timeout:
			t.Fatal("timed out waiting for outputs")
		}
	}
}

// generate runs requests concurrently and returns each one's results.
func generate(t testing.TB, e *Engine, reqs []Request) [][]result {
	t.Helper()
	out := make([][]result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		ch, err := e.Generate(context.Background(), r)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = collect(t, ch, max(r.Params.N, 1))
		}()
	}
	wg.Wait()
	return out
}

// generateTogether is generate with the requests submitted as one (GenerateAll), so that
// the engine admits them before it plans a step: for tests that count steps of a batch,
// which a late second submission would make a run of each request alone.
func generateTogether(t testing.TB, e *Engine, reqs []Request) [][]result {
	t.Helper()
	chans, err := e.GenerateAll(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]result, len(reqs))
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = collect(t, ch, max(reqs[i].Params.N, 1))
		}()
	}
	wg.Wait()
	return out
}

// waitIdle waits until the engine holds no blocks and no requests.
func waitIdle(t testing.TB, e *Engine) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := e.Stats()
		if s.UsedBlocks == 0 && s.Running == 0 && s.Waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle: %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// randomPrompt makes a deterministic prompt of n tokens in [1, vocab).
func randomPrompt(seed, n, vocab int) []int32 {
	p := make([]int32, n)
	x := uint64(seed)*0x9e3779b97f4a7c15 + 1
	for i := range p {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i] = int32(1 + x%uint64(vocab-1))
	}
	return p
}

func fmtTokens(r []result) string { return fmt.Sprint(r[0].tokens) }

// checkEngine checks, on the loop after a step, the KV manager's invariants and the
// engine's bookkeeping against them: running sequences hold blocks and no others do; at
// most one token is pending per sequence, and only while a step is in flight; a running
// sequence's computed tokens do not pass its length, a waiting one has none.
func checkEngine(e *Engine) error {
	if err := e.kv.Check(); err != nil {
		return err
	}
	held := 0
	for _, r := range e.active {
		for _, s := range r.seqs {
			switch {
			case s.status == statusRunning && !e.kv.HasRequest(s.id):
				return fmt.Errorf("running sequence %q without blocks", s.id)
			case s.status != statusRunning && e.kv.HasRequest(s.id):
				return fmt.Errorf("sequence %q holds blocks but is not running", s.id)
			case s.status != statusFinished && (s.pending < 0 || s.pending > 1):
				return fmt.Errorf("sequence %q has %d pending tokens", s.id, s.pending)
			case s.status != statusFinished && s.pending > 0 && e.inflight == nil:
				return fmt.Errorf("sequence %q has a pending token with no step in flight", s.id)
			case s.status == statusRunning && s.numComputed > s.length():
				return fmt.Errorf("sequence %q: %d computed of %d tokens", s.id, s.numComputed, s.length())
			case s.status == statusWaiting && s.numComputed != 0:
				return fmt.Errorf("waiting sequence %q has %d computed tokens", s.id, s.numComputed)
			}
			if e.kv.HasRequest(s.id) {
				held++
				if pol := r.policy; pol.Drops() {
					if n, most := len(e.kv.BlockTable(s.id)), pol.Spec().BudgetTokens/e.kv.BlockSize(); n > most {
						return fmt.Errorf("sequence %q under kv policy %s holds %d blocks, budget %d", s.id, pol.Spec(), n, most)
					}
				}
			}
		}
	}
	if held != e.kv.NumRequests() {
		return errors.New("the manager holds sequences the engine does not know")
	}
	return nil
}
