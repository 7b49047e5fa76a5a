package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/model"
)

// modeRuns are the results of one workload under both scheduling modes, with the async
// engine's stats and count of discarded in-flight tokens.
type modeRuns struct {
	async, serial [][]result
	stats         Stats
	discarded     int64
}

// runBoth runs reqs on a fresh engine in each scheduling mode, checking the engine after
// every step and that nothing is held at the end.
func runBoth(t *testing.T, tm *tinyModel, cfg Config, reqs []Request) modeRuns {
	t.Helper()
	var runs modeRuns
	for _, m := range schedulingModes {
		cfg.DisableAsyncScheduling = m.serial
		var stepErr error
		e := tm.engineWithHook(t, cfg, func(e *Engine) {
			if err := checkEngine(e); err != nil && stepErr == nil {
				stepErr = err
			}
		})
		got := generate(t, e, reqs)
		waitIdle(t, e)
		e.Close()
		if stepErr != nil {
			t.Fatalf("%s: invariant broken: %v", m.name, stepErr)
		}
		if err := e.kv.Check(); err != nil || e.kv.NumRequests() != 0 {
			t.Fatalf("%s: KV manager after the run: %v, %d sequences held", m.name, err, e.kv.NumRequests())
		}
		if m.serial {
			runs.serial = got
		} else {
			runs.async, runs.stats, runs.discarded = got, e.Stats(), e.discarded
		}
	}
	return runs
}

// sameResults reports the first difference between two runs' results: each choice's
// tokens, text, finish and stop reasons, logprobs (to rounding: a sequence recomputed after
// preemption may see its logits computed in a batch of another shape), and each request's
// final usage. (The usage on a choice's last output is a running total that counts its
// siblings' progress, which depends on how steps were batched.)
func sameResults(a, b [][]result) error {
	for i := range a {
		var ua, ub Usage
		for c := range a[i] {
			x, y := a[i][c], b[i][c]
			if x.usage.CompletionTokens > ua.CompletionTokens {
				ua = x.usage
			}
			if y.usage.CompletionTokens > ub.CompletionTokens {
				ub = y.usage
			}
			if !closeLogprobs(x.lps, y.lps) {
				return fmt.Errorf("request %d choice %d: logprobs async %v, sync %v", i, c, x.lps, y.lps)
			}
			x.usage, y.usage, x.lps, y.lps = Usage{}, Usage{}, nil, nil
			if !reflect.DeepEqual(x, y) {
				return fmt.Errorf("request %d choice %d:\n async %+v\n sync  %+v", i, c, x, y)
			}
		}
		if ua.PromptTokens != ub.PromptTokens || ua.CompletionTokens != ub.CompletionTokens {
			return fmt.Errorf("request %d: usage async %+v, sync %+v", i, ua, ub)
		}
	}
	return nil
}

// closeLogprobs reports whether two choices' logprobs name the same tokens with log
// probabilities within 1e-4.
func closeLogprobs(a, b []Logprob) bool {
	near := func(x, y TokenLogprob) bool {
		return x.ID == y.ID && math.Abs(float64(x.Logprob-y.Logprob)) <= 1e-4
	}
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i].Token, b[i].Token) || len(a[i].Top) != len(b[i].Top) {
			return false
		}
		for j := range a[i].Top {
			if !near(a[i].Top[j], b[i].Top[j]) {
				return false
			}
		}
	}
	return true
}

// TestAsyncMatchesSync: stories260K's requests ending every way (end of generation, stop
// strings, stop token ids, max_tokens, min_tokens, n > 1 with seeds, logprobs,
// penalties), batched together, through a roomy pool and through a tight one that
// preempts, give the same tokens, text, finish reasons, logprobs and usage with
// asynchronous scheduling as without. Sequences that finish while their next step is in
// flight stream nothing more (collect fails on output after the finish) and hold nothing
// afterwards.
func TestAsyncMatchesSync(t *testing.T) {
	tm := storiesModel(t)
	seed := func(v uint64) *uint64 { return &v }
	var reqs []Request
	for i := range 24 {
		p := Request{Prompt: []string{"Once upon a time", "Lily and Tom", "The cat", "One day"}[i%4]}
		switch i % 6 {
		case 0: // natural end of generation
			p.Params = SamplingParams{MaxTokens: 200}
		case 1: // stop strings cut mid-token
			p.Params = SamplingParams{MaxTokens: 80, Stop: []string{"ed", "she"}}
		case 2: // exact max_tokens, and a sampled n > 1 with a seed
			p.Params = SamplingParams{MaxTokens: 7 + i, IgnoreEOS: true, N: 3, Temperature: 0.9, TopP: 0.9, Seed: seed(uint64(i))}
		case 3: // stop token ids held back by min_tokens
			p.Params = SamplingParams{MaxTokens: 60, StopTokenIDs: []int32{13, 29}, MinTokens: 3}
		case 4: // logprobs and penalties on the host path, n > 1 greedy
			p.Params = SamplingParams{MaxTokens: 30, N: 2, Logprobs: true, TopLogprobs: 2, FrequencyPenalty: 0.5}
		case 5: // sampled, stop strings, seeded
			p.Params = SamplingParams{MaxTokens: 50, Temperature: 1, Seed: seed(uint64(100 + i)), Stop: []string{"."}, IncludeStopStrInOutput: true}
		}
		reqs = append(reqs, p)
	}
	for _, c := range []struct {
		name    string
		cfg     Config
		preempt bool
	}{
		{"roomy", Config{}, false},
		{"preempting", Config{NumBlocks: 40, BlockSize: 8, SchedulerConfig: SchedulerConfig{MaxNumBatchedTokens: 48}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs := runBoth(t, tm, c.cfg, reqs)
			if err := sameResults(runs.async, runs.serial); err != nil {
				t.Fatal(err)
			}
			finishes := map[string]int{}
			for i, r := range runs.async {
				for _, ch := range r {
					finishes[ch.finish]++
					if ch.finish == FinishLength && len(ch.tokens) != reqs[i].Params.MaxTokens {
						t.Errorf("request %d: finished by length after %d tokens, max_tokens %d", i, len(ch.tokens), reqs[i].Params.MaxTokens)
					}
					if len(ch.tokens) > reqs[i].Params.MaxTokens {
						t.Errorf("request %d: %d tokens past max_tokens %d", i, len(ch.tokens), reqs[i].Params.MaxTokens)
					}
				}
			}
			if finishes[FinishStop] == 0 || finishes[FinishLength] == 0 {
				t.Errorf("the workload did not end choices both ways: %v", finishes)
			}
			if runs.discarded == 0 {
				t.Errorf("no sequence finished while its next step was in flight")
			}
			if c.preempt && runs.stats.Preemptions == 0 {
				t.Errorf("no preemption under async scheduling: %+v", runs.stats)
			}
			t.Logf("finishes %v; %d in-flight tokens discarded; %+v", finishes, runs.discarded, runs.stats)
		})
	}
}

// TestAsyncSkipsSureFinish: a request that ends by max_tokens takes as many steps with
// asynchronous scheduling as without: no step is planned for a sequence whose token in
// flight is its last.
func TestAsyncSkipsSureFinish(t *testing.T) {
	tm := newTinyModel(t)
	req := Request{PromptTokens: randomPrompt(3, 10, 320), Params: SamplingParams{MaxTokens: 9, IgnoreEOS: true}}
	steps := map[bool]int64{}
	for _, m := range schedulingModes {
		e := tm.engine(t, Config{DisableAsyncScheduling: m.serial})
		r := generate(t, e, []Request{req})[0][0]
		if len(r.tokens) != 9 || r.finish != FinishLength {
			t.Fatalf("%s: %d tokens, finish %q", m.name, len(r.tokens), r.finish)
		}
		waitIdle(t, e)
		e.Close()
		steps[m.serial] = e.Stats().Steps
		if e.discarded != 0 {
			t.Errorf("%s: %d tokens sampled for nothing", m.name, e.discarded)
		}
	}
	if steps[false] != steps[true] || steps[true] != 9 {
		t.Errorf("steps: async %d, sync %d; want 9 (one prefill, eight decodes)", steps[false], steps[true])
	}
}

// slowBackend is a CPU backend whose every Run (a forward step) takes at least delay
// longer, standing in for a device the host could keep busy; Run fails with errFailRun
// from call failAt on (counting from when failAt was set; 0: never).
type slowBackend struct {
	*cpubackend.Backend
	delay  time.Duration
	runs   atomic.Int64
	failAt atomic.Int64
	busy   atomic.Int32 // Runs under way
}

var errFailRun = errors.New("device lost")

func (s *slowBackend) Run(fn func() error) error {
	n := s.runs.Add(1)
	if f := s.failAt.Load(); f > 0 && n >= f {
		return errFailRun
	}
	s.busy.Add(1)
	defer s.busy.Add(-1)
	time.Sleep(s.delay)
	return s.Backend.Run(fn)
}

// slowModel binds tm's weights to a slowBackend.
func slowModel(t *testing.T, tm *tinyModel, delay time.Duration) (*tinyModel, *slowBackend) {
	sb := &slowBackend{Backend: cpubackend.New(2), delay: delay}
	t.Cleanup(func() { sb.Close() })
	m, err := model.New(tm.fm, model.Options{Backends: []backend.Backend{sb}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return &tinyModel{fm: tm.fm, m: m, tok: tm.tok}, sb
}

// TestAsyncOverlaps: with asynchronous scheduling the host work of a step runs while the
// next step's forward pass does. Both take delay here (a slow device, and an afterStep
// hook standing in for slow host work), so serial steps take at least 2*delay each and
// overlapped ones about delay; and every step but the last is planned before the one
// before it has returned. The test fails if the loop falls back to serial order.
func TestAsyncOverlaps(t *testing.T) {
	const delay = 15 * time.Millisecond
	tm, _ := slowModel(t, newTinyModel(t), delay)
	var reqs []Request
	for i := range 4 {
		reqs = append(reqs, Request{PromptTokens: randomPrompt(i, 8, 320), Params: SamplingParams{MaxTokens: 12, IgnoreEOS: true}})
	}
	wall := map[bool]time.Duration{}
	for _, m := range schedulingModes {
		var steps int
		e := tm.engineWithHook(t, Config{DisableAsyncScheduling: m.serial}, func(*Engine) {
			steps++
			time.Sleep(delay)
		})
		start := time.Now()
		generate(t, e, reqs)
		wall[m.serial] = time.Since(start)
		e.Close()
		if m.serial && e.overlapped != 0 {
			t.Errorf("sync: %d steps overlapped", e.overlapped)
		}
		if !m.serial && e.overlapped < int64(steps)-2 {
			t.Errorf("async: %d of %d steps were planned while the one before ran", e.overlapped, steps)
		}
		t.Logf("%s: %d steps in %v, %d overlapped", m.name, steps, wall[m.serial], e.overlapped)
	}
	if wall[false] > wall[true]*3/4 {
		t.Errorf("async took %v, sync %v: the forward pass and the host work did not overlap", wall[false], wall[true])
	}
}

// TestForwardError: a failing forward pass fails the requests of its step and of the step
// planned behind it, with the error on their last outputs; their blocks are freed, and
// the engine serves the next request.
func TestForwardError(t *testing.T) {
	base := newTinyModel(t)
	forEachMode(t, func(t *testing.T, serial bool) {
		tm, sb := slowModel(t, base, 0)
		e := tm.engine(t, Config{DisableAsyncScheduling: serial})
		sb.failAt.Store(sb.runs.Load() + 4)
		var chans []<-chan Output
		for i := range 3 {
			ch, err := e.Generate(context.Background(), Request{PromptTokens: randomPrompt(i, 6, 320), Params: SamplingParams{MaxTokens: 50, IgnoreEOS: true}})
			if err != nil {
				t.Fatal(err)
			}
			chans = append(chans, ch)
		}
		for i, ch := range chans {
			var last Output
			for o := range ch {
				last = o
			}
			if last.FinishReason != FinishAbort || !errors.Is(last.Err, errFailRun) {
				t.Errorf("request %d: finish %q, err %v; want abort with %v", i, last.FinishReason, last.Err, errFailRun)
			}
		}
		waitIdle(t, e)
		sb.failAt.Store(0)
		r := generate(t, e, []Request{{PromptTokens: randomPrompt(9, 6, 320), Params: SamplingParams{MaxTokens: 5, IgnoreEOS: true}}})[0][0]
		if len(r.tokens) != 5 {
			t.Errorf("after the failure: %d tokens, want 5", len(r.tokens))
		}
	})
}

// TestCloseStopsForward: Shutdown with requests in flight aborts them, waits for the step
// in flight, and leaves no forward goroutine behind.
func TestCloseStopsForward(t *testing.T) {
	tm, _ := slowModel(t, newTinyModel(t), 2*time.Millisecond)
	e, err := New(tm.m, tm.tok, Config{NumBlocks: 64, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := e.Generate(context.Background(), Request{PromptTokens: randomPrompt(1, 6, 320), Params: SamplingParams{MaxTokens: 500, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		<-ch
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if err := e.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want the deadline", err)
	}
	var last Output
	for o := range ch {
		last = o
	}
	if last.FinishReason != FinishAbort {
		t.Errorf("request in flight finished %q, want abort", last.FinishReason)
	}
	if err := e.kv.Check(); err != nil || e.kv.NumRequests() != 0 || e.inflight != nil {
		t.Errorf("after Shutdown: %v, %d sequences hold blocks, step in flight %v", err, e.kv.NumRequests(), e.inflight != nil)
	}
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "forwardLoop") {
		t.Errorf("a forward goroutine outlived Shutdown:\n%s", stacks)
	}
}

// TestFailedStepUncaches: blocks a step offers the prefix cache when it is planned are
// taken out again when the step fails, so a later request with the same prompt recomputes
// them (no hit on keys and values that were never written) and gets the tokens a fresh
// engine gives.
func TestFailedStepUncaches(t *testing.T) {
	base := newTinyModel(t)
	prompt := randomPrompt(3, 40, 320)
	req := Request{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 5, IgnoreEOS: true}}
	want := generate(t, base.engine(t, Config{}), []Request{req})[0][0].tokens
	forEachMode(t, func(t *testing.T, serial bool) {
		tm, sb := slowModel(t, base, 0)
		e := tm.engine(t, Config{DisableAsyncScheduling: serial})
		sb.failAt.Store(sb.runs.Load() + 1) // the first prefill step fails
		ch, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var last Output
		for o := range ch {
			last = o
		}
		if !errors.Is(last.Err, errFailRun) {
			t.Fatalf("failing request: finish %q, err %v; want %v", last.FinishReason, last.Err, errFailRun)
		}
		waitIdle(t, e)
		if err := e.kv.Check(); err != nil {
			t.Fatal(err)
		}
		sb.failAt.Store(0)
		r := generate(t, e, []Request{req})[0][0]
		if r.usage.CachedPromptTokens != 0 {
			t.Errorf("after the failed step: %d prompt tokens from the cache, want 0", r.usage.CachedPromptTokens)
		}
		if !slices.Equal(r.tokens, want) {
			t.Errorf("after the failed step: tokens %v, want %v", r.tokens, want)
		}
		// Now the blocks were written: the same prompt again hits them.
		if r := generate(t, e, []Request{req})[0][0]; r.usage.CachedPromptTokens == 0 {
			t.Errorf("third request: no prefix cache hit")
		}
	})
}
