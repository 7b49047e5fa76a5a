package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRandomLifecycle pushes a thousand requests with random prompts, lengths, n, priorities
// and aborts through a small pool and budget (chunked prefill, prefix hits, preemption,
// forks, copy-on-write), under asynchronous and synchronous scheduling, checking the KV
// manager's invariants and the engine's bookkeeping after every step and that nothing is
// held at the end.
func TestRandomLifecycle(t *testing.T) {
	tm := newTinyModel(t)
	forEachMode(t, func(t *testing.T, serial bool) { randomLifecycle(t, tm, serial) })
}

func randomLifecycle(t *testing.T, tm *tinyModel, serial bool) {
	var (
		checkErr error
		steps    int
	)
	e := tm.engineWithHook(t, Config{NumBlocks: 40, BlockSize: 4, DisableAsyncScheduling: serial, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 12, MaxNumBatchedTokens: 24}}, func(e *Engine) {
		steps++
		if err := checkEngine(e); err != nil && checkErr == nil {
			checkErr = err
		}
	})

	rng := rand.New(rand.NewPCG(1, 2))
	shared := randomPrompt(5, 24, 320)
	const total = 1000
	var wg sync.WaitGroup
	var mu sync.Mutex
	finished := map[string]int{}
	for i := range total {
		p := randomPrompt(i, 1+rng.IntN(30), 320)
		if rng.IntN(3) == 0 {
			p = append(slices.Clone(shared[:rng.IntN(24)]), p...)
		}
		params := SamplingParams{N: 1 + rng.IntN(3), MaxTokens: 1 + rng.IntN(10), Temperature: float32(rng.IntN(2)), IgnoreEOS: rng.IntN(2) == 0}
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := e.Generate(ctx, Request{PromptTokens: p, Params: params, Priority: rng.IntN(3)})
		if err != nil {
			t.Fatal(err)
		}
		abortAfter := -1
		if rng.IntN(5) == 0 {
			abortAfter = rng.IntN(4)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			n := 0
			for o := range ch {
				n++
				if n == abortAfter+1 && abortAfter >= 0 {
					cancel()
				}
				if o.FinishReason != "" {
					mu.Lock()
					finished[o.FinishReason]++
					mu.Unlock()
				}
			}
		}()
		if abortAfter == 0 {
			cancel()
		}
		if i%100 == 99 {
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	waitIdle(t, e)
	e.Close() // the loop has ended: its state may be read here
	if checkErr != nil {
		t.Fatalf("invariant broken: %v", checkErr)
	}
	if err := e.kv.Check(); err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.UsedBlocks != 0 || st.KVUsage != 0 {
		t.Errorf("blocks leaked: %+v", st)
	}
	if st.Preemptions == 0 || st.PrefixHits == 0 {
		t.Errorf("the workload did not exercise preemption and prefix hits: %+v", st)
	}
	if !serial && e.overlapped == 0 {
		t.Errorf("no step was planned while another ran")
	}
	t.Logf("%d steps (%d overlapped); %+v; client saw %v", steps, e.overlapped, st, finished)
}

func TestRefuseTooLong(t *testing.T) {
	tm := newTinyModel(t)
	e := tm.engine(t, Config{NumBlocks: 9, BlockSize: 16, MaxModelLen: 100})
	cases := []struct {
		name   string
		prompt int
		max    int
		want   []string
	}{
		{"context", 90, 20, []string{"90", "20", "110", "context length of 100"}},
		{"no room", 100, 0, []string{"100", "no room"}},
	}
	for _, c := range cases {
		_, err := e.Generate(context.Background(), Request{PromptTokens: randomPrompt(1, c.prompt, 320), Params: SamplingParams{MaxTokens: c.max}})
		if !errors.Is(err, ErrTooLong) {
			t.Fatalf("%s: err %v, want ErrTooLong", c.name, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
	}
	// A pool smaller than the context: MaxModelLen is capped to the pool's 128 tokens.
	e2 := tm.engine(t, Config{NumBlocks: 9, BlockSize: 16})
	_, err := e2.Generate(context.Background(), Request{PromptTokens: randomPrompt(1, 100, 320), Params: SamplingParams{MaxTokens: 50}})
	if !errors.Is(err, ErrTooLong) || !strings.Contains(err.Error(), "150") || !strings.Contains(err.Error(), "128") {
		t.Errorf("pool: err %v", err)
	}
	var pe *ParamError
	_, err = e.Generate(context.Background(), Request{PromptTokens: []int32{1}, Params: SamplingParams{TopP: 2}})
	if !errors.As(err, &pe) || pe.Param != "top_p" {
		t.Errorf("top_p 2: err %v", err)
	}
	_, err = e.Generate(context.Background(), Request{PromptTokens: []int32{1, 999}})
	if !errors.As(err, &pe) || pe.Param != "prompt" {
		t.Errorf("token 999: err %v", err)
	}
}

// TestNoLivelock runs a workload whose KV need is 3x the pool at once.
func TestNoLivelock(t *testing.T) {
	tm := newTinyModel(t)
	e := tm.engine(t, Config{NumBlocks: 33, BlockSize: 8, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 64}})
	pool := 32 * 8
	var reqs []Request
	need := 0
	for i := 0; need < 3*pool; i++ {
		r := Request{PromptTokens: randomPrompt(100+i, 20+i%40, 320), Params: SamplingParams{MaxTokens: 24 + i%16, IgnoreEOS: true}}
		need += len(r.PromptTokens) + r.Params.MaxTokens
		reqs = append(reqs, r)
	}
	// One request that needs nearly the whole pool by itself.
	reqs = append(reqs, Request{PromptTokens: randomPrompt(7, 200, 320), Params: SamplingParams{MaxTokens: pool - 200, IgnoreEOS: true}})
	res := generate(t, e, reqs)
	for i, r := range res {
		if r[0].finish != FinishLength || len(r[0].tokens) != reqs[i].Params.MaxTokens {
			t.Errorf("request %d: %d tokens, finish %q", i, len(r[0].tokens), r[0].finish)
		}
	}
	waitIdle(t, e)
	t.Logf("%d requests needing %d tokens in a pool of %d: %+v", len(reqs), need, pool, e.Stats())
}

func TestCancelFreesBlocks(t *testing.T) {
	tm := newTinyModel(t)
	e := tm.engine(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Generate(ctx, Request{PromptTokens: randomPrompt(3, 100, 320), Params: SamplingParams{N: 3, MaxTokens: 500, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		<-ch
	}
	if e.Stats().UsedBlocks == 0 {
		t.Fatal("no blocks in use while generating")
	}
	cancel()
	for range ch {
	}
	waitIdle(t, e)
	if got := e.Stats().Finished[FinishAbort]; got != 3 {
		t.Errorf("%d choices aborted, want 3", got)
	}
}
