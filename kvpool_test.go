package kvasir

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/redistest"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// poolEngine opens stories260K with the given pool settings (KVCacheMemory bytes of KV).
func poolEngine(t *testing.T, opt Options) *Engine {
	t.Helper()
	opt.Tokenizer = testdata.Path(t, "models/stories260K/tok512.bin")
	opt.Threads = 2
	if opt.KVCacheMemory == 0 {
		opt.KVCacheMemory = 4 << 20
	}
	e, err := Open(testdata.Path(t, "models/stories260K/stories260K.bin"), opt)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// poolPrompt is a prompt of n token ids, different for each seed.
func poolPrompt(n, seed int) []int32 {
	p := make([]int32, n)
	p[0] = 1
	for i := 1; i < n; i++ {
		p[i] = int32(3 + (i*37+seed*101+i*i*seed)%500)
	}
	return p
}

// greedy runs a greedy request to its end and returns its tokens and usage; it fails the
// test on any error.
func greedy(t *testing.T, e *Engine, prompt []int32, maxTokens int) ([]int32, Usage) {
	t.Helper()
	ch, err := e.Generate(context.Background(), Request{PromptTokens: prompt, Params: SamplingParams{MaxTokens: maxTokens}})
	if err != nil {
		t.Fatal(err)
	}
	var toks []int32
	var last Output
	for o := range ch {
		if o.Err != nil {
			t.Fatalf("request failed: %v", o.Err)
		}
		toks = append(toks, o.TokenIDs...)
		last = o
	}
	if last.FinishReason != FinishLength {
		t.Fatalf("finish reason %q, want length", last.FinishReason)
	}
	return toks, last.Usage
}

func flushPool(t *testing.T, e *Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.FlushKVPool(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitIdle waits until e holds no KV blocks, failing the test after a while.
func waitIdle(t *testing.T, e *Engine) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.Stats().KVUsage != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("KV usage stays at %v", e.Stats().KVUsage)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkGoroutines fails the test when more goroutines run than before, once they had a
// while to end.
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKVPoolSecondInstance: a second instance serving a prefix another computed takes its
// blocks from the pool (counted as cached prompt tokens) and answers, greedily, what an
// instance computing the prompt itself answers; a prompt that continues the prefix takes
// the shared part only.
func TestKVPoolSecondInstance(t *testing.T) {
	srv := redistest.Start(t)
	prompt := poolPrompt(300, 1)
	a := poolEngine(t, Options{KVPool: srv.URL()})
	defer a.Close()
	wantA, usageA := greedy(t, a, prompt, 24)
	if usageA.CachedPromptTokens != 0 {
		t.Fatalf("first instance: %d cached tokens on an empty pool", usageA.CachedPromptTokens)
	}
	flushPool(t, a)

	b := poolEngine(t, Options{KVPool: srv.URL()})
	defer b.Close()
	got, usage := greedy(t, b, prompt, 24)
	full := (len(prompt) - 1) / 16 * 16
	if usage.CachedPromptTokens != full {
		t.Errorf("second instance: %d cached prompt tokens, want %d (every full block from the pool)", usage.CachedPromptTokens, full)
	}
	local := poolEngine(t, Options{})
	defer local.Close()
	want, _ := greedy(t, local, prompt, 24)
	if !slices.Equal(want, wantA) || !slices.Equal(got, want) {
		t.Errorf("greedy tokens\n from the pool %v\n recomputed    %v\n first         %v", got, want, wantA)
	}
	s, ok := b.KVPoolStats()
	if !ok || s.Hits != int64(full/16) || s.ReadBytes == 0 || !s.Up {
		t.Errorf("second instance's pool stats %+v", s)
	}

	// A prompt sharing the first 10 blocks: 10 from the pool (or b's own cache), the rest computed.
	other := append(slices.Clone(prompt[:165]), poolPrompt(100, 2)[1:]...)
	c := poolEngine(t, Options{KVPool: srv.URL()})
	defer c.Close()
	if _, u := greedy(t, c, other, 8); u.CachedPromptTokens != 160 {
		t.Errorf("shared prefix of 10 blocks: %d cached tokens, want 160", u.CachedPromptTokens)
	}
	for _, e := range []*Engine{a, b, c} {
		waitIdle(t, e)
	}
}

// TestKVPoolCorruptValue: a block whose stored value was damaged is recomputed, as is
// everything after it; the answer is the recomputed one's.
func TestKVPoolCorruptValue(t *testing.T) {
	srv := redistest.Start(t)
	prompt := poolPrompt(200, 3)
	a := poolEngine(t, Options{KVPool: srv.URL()})
	defer a.Close()
	want, _ := greedy(t, a, prompt, 16)
	flushPool(t, a)
	hashes := a.BlockHashes(prompt, "")
	key := a.pool.Key(hashes[4])
	if reply, err := srv.Do("SETRANGE", key, "100", "X"); err != nil || reply[0] != ':' {
		t.Fatalf("SETRANGE %s: %q %v", key, reply, err)
	}
	b := poolEngine(t, Options{KVPool: srv.URL()})
	defer b.Close()
	got, usage := greedy(t, b, prompt, 16)
	if usage.CachedPromptTokens != 4*16 {
		t.Errorf("%d cached tokens, want the 64 before the corrupt block", usage.CachedPromptTokens)
	}
	if !slices.Equal(got, want) {
		t.Errorf("after a corrupt block: %v, want %v", got, want)
	}
	if s, _ := b.KVPoolStats(); s.Corrupt != 1 {
		t.Errorf("corrupt %d, want 1", s.Corrupt)
	}
	waitIdle(t, b)
}

// TestKVPoolRedisKilled: Redis killed while requests run: every request still succeeds
// (with the answer of an engine without a pool), the failures are counted, KV usage
// returns to 0 and no goroutine is left.
func TestKVPoolRedisKilled(t *testing.T) {
	srv := redistest.Start(t)
	local := poolEngine(t, Options{})
	defer local.Close()
	before := runtime.NumGoroutine()
	e := poolEngine(t, Options{KVPool: srv.URL(), KVPoolLog: quietLog()})
	const n = 24
	want := make([][]int32, n)
	for i := range n {
		want[i], _ = greedy(t, local, poolPrompt(120+i%3*40, 10+i%6), 12)
	}
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == n/3 {
				srv.Kill()
			}
			ch, err := e.Generate(context.Background(), Request{PromptTokens: poolPrompt(120+i%3*40, 10+i%6), Params: SamplingParams{MaxTokens: 12}})
			if err != nil {
				errs <- err.Error()
				return
			}
			var toks []int32
			for o := range ch {
				if o.Err != nil {
					errs <- o.Err.Error()
				}
				toks = append(toks, o.TokenIDs...)
			}
			if !slices.Equal(toks, want[i]) {
				errs <- "request " + strconv.Itoa(i) + ": other tokens"
			}
		}()
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	waitIdle(t, e)
	if s, _ := e.KVPoolStats(); s.Errors == 0 {
		t.Errorf("no pool error counted after Redis died: %+v", s)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	checkGoroutines(t, before)
}

// TestKVOffloadTier: a prompt whose blocks the device cache evicted is served from the host
// tier (counted as cached tokens), with the same greedy answer.
func TestKVOffloadTier(t *testing.T) {
	// stories260K: 5 layers x 4 KV heads x 8 dims x 2 x 4 bytes = 1280 bytes a token, so
	// 1 MiB holds 51 blocks of 16 tokens: three 260-token prompts evict the first.
	first := poolPrompt(260, 20)
	full := (len(first) - 1) / 16 * 16
	run := func(offload int64) ([]int32, []int32, Usage, KVPoolStats) {
		e := poolEngine(t, Options{KVCacheMemory: 1 << 20, KVOffloadMemory: offload, MaxModelLen: 400})
		defer e.Close()
		want, _ := greedy(t, e, first, 8)
		for seed := 21; seed < 24; seed++ {
			greedy(t, e, poolPrompt(260, seed), 8)
		}
		got, usage := greedy(t, e, first, 8)
		waitIdle(t, e)
		s, _ := e.KVPoolStats()
		return want, got, usage, s
	}
	if _, _, u, _ := run(0); u.CachedPromptTokens >= full/2 {
		t.Fatalf("without a host tier %d of %d tokens still cached: the test evicts too little", u.CachedPromptTokens, full)
	}
	want, got, usage, s := run(8 << 20)
	if usage.CachedPromptTokens != full {
		t.Errorf("%d cached tokens, want %d (device cache and host tier)", usage.CachedPromptTokens, full)
	}
	if !slices.Equal(got, want) {
		t.Errorf("from the host tier %v, want %v", got, want)
	}
	if s.OffloadHits < int64(full/16/2) || s.OffloadBlocks == 0 || s.Up {
		t.Errorf("host tier stats %+v", s)
	}
}

func TestKVNamespaceDiffers(t *testing.T) {
	a := poolEngine(t, Options{KVOffloadMemory: 1 << 20})
	defer a.Close()
	b := poolEngine(t, Options{KVOffloadMemory: 1 << 20, KVCacheDType: KVCacheF16})
	defer b.Close()
	na, nb := a.pool.Key([16]byte{}), b.pool.Key([16]byte{})
	if na == nb {
		t.Errorf("an F32 and an F16 cache share keys: %s", na)
	}
	if _, err := hex.DecodeString(na[len("kvasir:kv:") : len("kvasir:kv:")+24]); err != nil {
		t.Errorf("key %q: %v", na, err)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// blackHole is a "Redis" that accepts connections and never answers: a server that hangs.
// received returns the bytes it was sent so far.
func blackHole(t *testing.T) (url string, received func() int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					got.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "redis://" + ln.Addr().String(), func() int64 {
		time.Sleep(20 * time.Millisecond) // what was sent has arrived
		return got.Load()
	}
}

// TestKVPoolHungServer: a Redis that never answers costs a request at most the pool's
// timeouts, then the breaker opens and requests no longer wait for it; a request aborted
// while its lookup hangs ends at once and frees everything.
func TestKVPoolHungServer(t *testing.T) {
	url, received := blackHole(t)
	before := runtime.NumGoroutine()
	e := poolEngine(t, Options{KVPool: url, KVPoolLog: quietLog()})
	prompt := poolPrompt(100, 30)

	// Aborted while the lookup hangs.
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Generate(ctx, Request{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 4}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if s := e.Stats(); s.Waiting != 1 {
		t.Errorf("a request parked on its lookup: %d waiting, want 1", s.Waiting)
	}
	start := time.Now()
	cancel()
	for range ch {
	}
	for e.Stats().Waiting > 0 {
		if time.Since(start) > 200*time.Millisecond {
			t.Fatalf("the aborted request still waits after %v", time.Since(start))
		}
		time.Sleep(time.Millisecond)
	}
	waitIdle(t, e)

	// Served without the pool: the first requests wait for the timeouts, then none do.
	for i := range 4 {
		greedy(t, e, poolPrompt(100, 31+i), 4)
	}
	sent := received()
	start = time.Now()
	greedy(t, e, poolPrompt(100, 40), 4)
	if d, now := time.Since(start), received(); now != sent || d > time.Second {
		t.Errorf("with the breaker open a request took %v and sent Redis %d bytes", d, now-sent)
	}
	if s, _ := e.KVPoolStats(); s.Up || s.Errors < 3 {
		t.Errorf("stats %+v, want the breaker open after errors", s)
	}
	waitIdle(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	checkGoroutines(t, before)
}

// TestKVPoolParallelAndBeams: a second instance's n = 2 request and its beam search both
// take the prefix from the pool and answer what recomputing answers; a request asking for
// prompt logprobs computes its whole prompt.
func TestKVPoolParallelAndBeams(t *testing.T) {
	srv := redistest.Start(t)
	prompt := poolPrompt(180, 5)
	a := poolEngine(t, Options{KVPool: srv.URL()})
	defer a.Close()
	greedy(t, a, prompt, 4)
	flushPool(t, a)
	local := poolEngine(t, Options{})
	defer local.Close()
	full := (len(prompt) - 1) / 16 * 16
	for name, p := range map[string]SamplingParams{
		"n=2":      {MaxTokens: 10, N: 2},
		"beams":    {MaxTokens: 10, N: 2, UseBeamSearch: true},
		"logprobs": {MaxTokens: 3, PromptLogprobs: true},
	} {
		run := func(e *Engine) ([2][]int32, Usage) {
			ch, err := e.Generate(context.Background(), Request{PromptTokens: prompt, Params: p})
			if err != nil {
				t.Fatal(err)
			}
			var toks [2][]int32
			var last Output
			for o := range ch {
				if o.Err != nil {
					t.Fatalf("%s: %v", name, o.Err)
				}
				toks[o.Index] = append(toks[o.Index], o.TokenIDs...)
				last = o
			}
			return toks, last.Usage
		}
		b := poolEngine(t, Options{KVPool: srv.URL()})
		got, u := run(b)
		want, _ := run(local)
		wantCached := full
		if p.PromptLogprobs {
			wantCached = 0
		}
		if u.CachedPromptTokens != wantCached {
			t.Errorf("%s: %d cached tokens, want %d", name, u.CachedPromptTokens, wantCached)
		}
		if len(got[0]) == 0 || !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
			t.Errorf("%s: %v, recomputed %v", name, got, want)
		}
		waitIdle(t, b)
		b.Close()
	}
}
