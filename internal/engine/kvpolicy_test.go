package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// fullPolicy is the full policy, for requests tests make by hand.
var fullPolicy, _ = kvcache.NewPolicy(kvcache.FullSpec(), kvcache.DefaultBlockSize)

// streamingReference is what a fake model sees under StreamingLLM on blocks of bs tokens,
// written from the policy's definition rather than from its code: the prompt computed at
// once (it fits the budget), then one token a step; before a token that would open a block
// past maxBlocks, the oldest block behind the sinkBlocks sink blocks goes. It returns n
// greedy tokens.
func streamingReference(vocab, bs, maxBlocks, sinkBlocks int, prompt []int32, n int) []int32 {
	kept := slices.Clone(prompt)
	var out []int32
	for len(out) < n {
		t := int32(sample.Greedy(fakeLogits(vocab, kept)))
		out = append(out, t)
		if (len(kept)+1+bs-1)/bs > maxBlocks {
			kept = slices.Delete(kept, sinkBlocks*bs, (sinkBlocks+1)*bs)
		}
		kept = append(kept, t)
	}
	return out
}

// tokenRecencyReference is what a fake model (which reports no attention mass, so every
// token scores alike) sees under h2o or snapkv: before a token that would open a block past
// the budget, the block's worth of oldest tokens after the sinks goes.
func tokenRecencyReference(vocab, bs, budget, sinks int, prompt []int32, n int) []int32 {
	kept := slices.Clone(prompt)
	var out []int32
	for len(out) < n {
		t := int32(sample.Greedy(fakeLogits(vocab, kept)))
		out = append(out, t)
		if (len(kept)+1+bs-1)/bs > budget/bs {
			kept = slices.Delete(kept, sinks, sinks+bs)
		}
		kept = append(kept, t)
	}
	return out
}

func streamingSpec(budget, sinks int) *kvcache.PolicySpec {
	return &kvcache.PolicySpec{Name: kvcache.PolicyStreaming, BudgetTokens: budget, SinkTokens: sinks, WindowTokens: kvcache.Unset}
}

// Under a budget the sequence's cache holds the sinks and the latest blocks, every entry at
// its cache index (the fake model fails a step whose context holds a position that is not
// its index), for a generation of 10x the budget, past the model's context length; and with
// the budget above the sequence's length the tokens are full attention's.
func TestStreamingPolicyFake(t *testing.T) {
	const vocab, bs = 61, 4
	for _, async := range []bool{false, true} {
		e, _ := fakeEngine(t, vocab, Config{NumBlocks: 64, BlockSize: bs, MaxModelLen: 100, DisableAsyncScheduling: !async}, false)
		prompt := randomPrompt(3, 10, vocab)
		const budget, out = 24, 240
		res := generate(t, e, []Request{
			{PromptTokens: prompt, Params: SamplingParams{MaxTokens: out, IgnoreEOS: true}, KVPolicy: streamingSpec(budget, 4)},
			{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 50, IgnoreEOS: true}, KVPolicy: streamingSpec(64, 4)},
		})
		want := streamingReference(vocab, bs, budget/bs, 1, prompt, out)
		if got := res[0][0].tokens; !slices.Equal(got, want) {
			t.Fatalf("async %v: streaming tokens\n got %v\nwant %v", async, got, want)
		}
		if res[0][0].finish != FinishLength || len(res[0][0].tokens) != out {
			t.Errorf("async %v: finished %q after %d tokens, want length after %d (past the context of 100)", async, res[0][0].finish, len(res[0][0].tokens), out)
		}
		if got, want := res[1][0].tokens, fakeGreedy(vocab, prompt, 50); !slices.Equal(got, want) {
			t.Errorf("async %v: budget above the length: tokens\n got %v\nwant %v (full attention)", async, got, want)
		}
		waitIdle(t, e)
		if free := e.kv.NumFreeBlocks(); free != 63 {
			t.Errorf("async %v: %d of 63 blocks free after the requests", async, free)
		}
	}
}

// A long prompt under streaming prefills in chunks within the budget; prefix caching stays
// on, yet a compressed sequence publishes nothing.
func TestStreamingPolicyPromptAndPrefixCache(t *testing.T) {
	const vocab, bs = 61, 4
	e, _ := fakeEngine(t, vocab, Config{NumBlocks: 64, BlockSize: bs, MaxModelLen: 80}, false)
	prompt := randomPrompt(5, 150, vocab) // longer than the context and the pool's share of it
	res := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 30, IgnoreEOS: true}, KVPolicy: streamingSpec(32, 4)}})
	if len(res[0][0].tokens) != 30 {
		t.Fatalf("%d tokens, want 30", len(res[0][0].tokens))
	}
	waitIdle(t, e)
	if n := e.kv.NumCachedBlocks(); n != 0 {
		t.Errorf("a streaming sequence published %d blocks to the prefix cache", n)
	}
	// A full request publishes as before, and a streaming one with the same prompt takes
	// no hits from it (its cache would pass the budget) yet equals full attention while
	// within the budget.
	short := randomPrompt(7, 12, vocab)
	generate(t, e, []Request{{PromptTokens: short, Params: SamplingParams{MaxTokens: 4}}})
	if n := e.kv.NumCachedBlocks(); n == 0 {
		t.Fatal("a full request published nothing")
	}
	res = generate(t, e, []Request{{PromptTokens: short, Params: SamplingParams{MaxTokens: 8, IgnoreEOS: true}, KVPolicy: streamingSpec(64, 4)}})
	if got, want := res[0][0].tokens, fakeGreedy(vocab, short, 8); !slices.Equal(got, want) {
		t.Errorf("streaming after a cached prefix: %v, want %v", got, want)
	}
	if res[0][0].usage.CachedPromptTokens != 0 {
		t.Errorf("a streaming request took %d cached prompt tokens", res[0][0].usage.CachedPromptTokens)
	}
}

// Forked choices share their blocks until their policy rotates keys: each then gets
// copies of its own, and every choice equals the reference.
func TestStreamingPolicyForks(t *testing.T) {
	const vocab, bs = 61, 4
	e, _ := fakeEngine(t, vocab, Config{NumBlocks: 64, BlockSize: bs}, false)
	prompt := randomPrompt(2, 9, vocab)
	res := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{N: 3, MaxTokens: 60, IgnoreEOS: true}, KVPolicy: streamingSpec(20, 2)}})
	want := streamingReference(vocab, bs, 5, 1, prompt, 60)
	for i, c := range res[0] {
		if !slices.Equal(c.tokens, want) {
			t.Errorf("choice %d: %v, want %v", i, c.tokens, want)
		}
	}
}

// Bad policies are refused with the reason, engine-wide and per request.
func TestPolicyErrors(t *testing.T) {
	e, _ := fakeEngine(t, 61, Config{BlockSize: 4}, false)
	for _, spec := range []kvcache.PolicySpec{
		{Name: "snapkv2", BudgetTokens: -1, SinkTokens: -1, WindowTokens: -1},
		{Name: "streaming", BudgetTokens: 16, SinkTokens: 4, WindowTokens: 20},
		{Name: "streaming", BudgetTokens: 8, SinkTokens: 4, WindowTokens: -1},
		{Name: "full", BudgetTokens: 16, SinkTokens: -1, WindowTokens: -1},
		{Name: "streaming", BudgetTokens: 1 << 20, SinkTokens: 4, WindowTokens: -1},
	} {
		_, err := e.Generate(context.Background(), Request{PromptTokens: []int32{1, 2}, Params: SamplingParams{MaxTokens: 2}, KVPolicy: &spec})
		var pe *ParamError
		if err == nil || (!errors.As(err, &pe) && !errors.Is(err, ErrTooLong)) {
			t.Errorf("policy %s: error %v, want a parameter error", spec, err)
		}
	}
	spec := streamingSpec(32, 4)
	_, err := e.Generate(context.Background(), Request{PromptTokens: []int32{1, 2}, Params: SamplingParams{N: 2, UseBeamSearch: true, MaxTokens: 2}, KVPolicy: spec})
	if err == nil {
		t.Error("beam search under streaming was accepted")
	}
	if _, err := assemble(newFakeModel(61, 16, 4), ModelInfo{VocabSize: 61}, nil, Config{NumBlocks: 16, BlockSize: 4, KVPolicy: kvcache.PolicySpec{Name: "lru"}}, drafter{}); err == nil {
		t.Error("an engine with an unknown kv policy was made")
	}
	// A model that reports no attention mass refuses the policies that need it.
	h2o := kvcache.PolicySpec{Name: kvcache.PolicyH2O, BudgetTokens: 64, SinkTokens: 4, WindowTokens: kvcache.Unset}
	if _, err := assemble(newFakeModel(61, 16, 4), ModelInfo{VocabSize: 61}, nil, Config{NumBlocks: 16, BlockSize: 4, KVPolicy: h2o}, drafter{}); err == nil || !strings.Contains(err.Error(), "attention mass") {
		t.Errorf("h2o on a model without attention mass: %v", err)
	}
}

// On the real stories260K (context 512): streaming, h2o and snapkv with a budget above the sequence's
// length is full attention token for token, and with the budget below it, full attention
// until the first drop; a generation of 10x the budget runs past the context length with
// the cache within the budget at every step and every block back in the pool afterwards.
func TestStreamingPolicyStories(t *testing.T) {
	tm := storiesModel(t)
	prompt := tm.tok.Encode("Once upon a time, there was a little girl named Lily.", tokenizer.EncodeOptions{AddSpecial: true})
	ids := make([]int32, len(prompt))
	for i, id := range prompt {
		ids[i] = int32(id)
	}
	forEachMode(t, func(t *testing.T, serial bool) {
		var mu sync.Mutex // the hook runs on the loop after the stats that waitIdle reads
		var broken error
		e := tm.engineWithHook(t, Config{DisableAsyncScheduling: serial}, func(e *Engine) {
			mu.Lock()
			defer mu.Unlock()
			if broken == nil {
				broken = checkEngine(e)
			}
		})
		const budget, long = 64, 640
		type variant struct{ name, selection string }
		variants := []variant{{kvcache.PolicyStreaming, ""}}
		if !serial {
			// The heavy hitters under one schedule (their steps do not overlap anyway), with
			// each selection: per sequence, per layer, per layer and KV head.
			for _, n := range []string{kvcache.PolicyH2O, kvcache.PolicySnapKV} {
				for _, sel := range []string{kvcache.SelectSequence, kvcache.SelectLayer, kvcache.SelectHead} {
					variants = append(variants, variant{n, sel})
				}
			}
		}
		narrows := map[variant][]int32{}
		for _, v := range variants {
			name := v.name + " " + v.selection
			spec := func(b int) *kvcache.PolicySpec {
				window := 16 // h2o's and snapkv's recent window
				if v.name == kvcache.PolicyStreaming {
					window = kvcache.Unset
				}
				return &kvcache.PolicySpec{Name: v.name, BudgetTokens: b, SinkTokens: 4, WindowTokens: window, Selection: v.selection}
			}
			res := generate(t, e, []Request{
				{PromptTokens: ids, Params: SamplingParams{MaxTokens: 120, IgnoreEOS: true}},
				{PromptTokens: ids, Params: SamplingParams{MaxTokens: 120, IgnoreEOS: true}, KVPolicy: spec(256)},
				{PromptTokens: ids, Params: SamplingParams{MaxTokens: long, IgnoreEOS: true}, KVPolicy: spec(budget)},
			})
			full, wide, narrow := res[0][0].tokens, res[1][0].tokens, res[2][0].tokens
			if !slices.Equal(wide, full) {
				t.Errorf("%s with budget 256 differs from full attention:\n%v\n%v", name, wide, full)
			}
			same := budget - len(ids) // tokens sampled before the first drop
			if len(narrow) != long || !slices.Equal(narrow[:same], full[:same]) {
				t.Errorf("%s with budget %d: %d tokens, first %d %v, want %d tokens starting %v", name, budget, len(narrow), same, narrow[:min(same, len(narrow))], long, full[:same])
			}
			if slices.Equal(narrow[:120], full) {
				t.Errorf("%s with budget %d never left full attention: the test shows nothing", name, budget)
			}
			narrows[v] = narrow
		}
		// A choice per layer or per head is not the sequence's one: the tokens part.
		for _, n := range []string{kvcache.PolicyH2O, kvcache.PolicySnapKV} {
			seqWide := narrows[variant{n, kvcache.SelectSequence}]
			for _, sel := range []string{kvcache.SelectLayer, kvcache.SelectHead} {
				if got, ok := narrows[variant{n, sel}]; ok && slices.Equal(got, seqWide) {
					t.Errorf("%s selection=%s at budget %d generates what selection=sequence does: the lanes chose alike", n, sel, budget)
				}
			}
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
	})
}

// On the fake model, which reports no attention mass, h2o and snapkv find every block
// equal and drop the oldest one outside the sinks and their window: streaming's choice.
// The sequence sits out the steps planned while one collecting its mass runs, so the
// tokens are those of the reference under both schedules.
func TestHeavyHittersFake(t *testing.T) {
	const vocab, bs = 61, 4
	for _, name := range []string{kvcache.PolicyH2O, kvcache.PolicySnapKV} {
		for _, serial := range []bool{false, true} {
			e, _ := fakeEngine(t, vocab, Config{NumBlocks: 64, BlockSize: bs, DisableAsyncScheduling: serial}, false)
			prompt := randomPrompt(5, 10, vocab)
			spec := &kvcache.PolicySpec{Name: name, BudgetTokens: 24, SinkTokens: 4, WindowTokens: 0}
			res := generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 120, IgnoreEOS: true}, KVPolicy: spec}})
			if got, want := res[0][0].tokens, streamingReference(vocab, bs, 6, 1, prompt, 120); !slices.Equal(got, want) {
				t.Errorf("%s (serial %v): %v, want %v", name, serial, got, want)
			}
			// Sinks off the block boundary: each eviction takes the 4 oldest tokens after
			// the 2 sinks, across two blocks, and the compaction moves every later token
			// (the fake fails a step whose context holds a position that is not its index).
			spec = &kvcache.PolicySpec{Name: name, BudgetTokens: 24, SinkTokens: 2, WindowTokens: 0}
			res = generate(t, e, []Request{{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 120, IgnoreEOS: true}, KVPolicy: spec}})
			if got, want := res[0][0].tokens, tokenRecencyReference(vocab, bs, 24, 2, prompt, 120); !slices.Equal(got, want) {
				t.Errorf("%s (serial %v), 2 sinks: %v, want %v", name, serial, got, want)
			}
		}
	}
}

// The mass state accumulates (h2o, scored by the mean over the queries that saw each
// entry) or keeps the latest window of queries (snapkv), and forgets dropped and evicted
// entries; per lane, each lane its own entries.
func TestMassState(t *testing.T) {
	h := newMassState(h2oPolicy(t, ""), massShape{1, 1})
	h.add([]float32{1, 2}, 2) // entry 0 seen by both queries, entry 1 by the last
	h.add([]float32{1, 1, 5}, 1)
	if got := h.score(3); !slices.Equal(got[0], []float32{2.0 / 3, 3.0 / 2, 5}) {
		t.Errorf("h2o score %v", got)
	}
	h.drop(1, 2)
	if got := h.score(2); !slices.Equal(got[0], []float32{2.0 / 3, 5}) {
		t.Errorf("h2o score after a drop %v", got)
	}
	h.add([]float32{1, 1, 4}, 1)
	h.evict([][]int{{0}})
	if got := h.score(2); !slices.Equal(got[0], []float32{3, 4}) {
		t.Errorf("h2o score after an eviction %v", got)
	}
	s := &massState{window: 2, fold: 1, lanes: make([]laneMass, 1)}
	s.add([]float32{9}, 1)
	s.add([]float32{1, 1}, 1)
	s.add([]float32{1, 1, 1}, 1)
	if got := s.score(3); !slices.Equal(got[0], []float32{2, 2, 1}) {
		t.Errorf("snapkv score %v (the first query is out of the window)", got)
	}
	if s.from(10) != 8 || h.from(10) != 0 {
		t.Errorf("mass rows from %d and %d of 10", s.from(10), h.from(10))
	}
	// Two lanes (selection per head, one layer of two KV heads): a step's mass holds a row
	// per lane; each lane evicts its own entries.
	two := newMassState(h2oPolicy(t, kvcache.SelectHead), massShape{2, 2})
	if n := two.size(3); n != 6 {
		t.Fatalf("size of a step's mass over 3 entries in 2 lanes: %d", n)
	}
	two.add([]float32{1, 2, 3, 4, 5, 6}, 1)
	two.add([]float32{1, 1, 1, 1, 2, 2, 2, 2}, 1)
	if got := two.score(4); !slices.Equal(got[0], []float32{1, 1.5, 2, 1}) || !slices.Equal(got[1], []float32{3, 3.5, 4, 2}) {
		t.Errorf("two lanes' h2o scores %v", got)
	}
	two.evict([][]int{{1}, {2}})
	if got := two.score(3); !slices.Equal(got[0], []float32{1, 2, 1}) || !slices.Equal(got[1], []float32{3, 3.5, 2}) {
		t.Errorf("two lanes' h2o scores after evicting entry 1 of lane 0 and entry 2 of lane 1: %v", got)
	}
	c := two.clone()
	two.evict([][]int{{0}})
	if got := c.score(3); !slices.Equal(got[0], []float32{1, 2, 1}) || !slices.Equal(got[1], []float32{3, 3.5, 2}) {
		t.Errorf("a clone changed with its origin: %v", got)
	}
	if got := two.score(2); !slices.Equal(got[0], []float32{2, 1}) || !slices.Equal(got[1], []float32{3.5, 2}) {
		t.Errorf("one list evicts from every lane: %v", got)
	}
	// Selection per layer folds a layer's KV heads into one lane, per sequence all.
	rows := []float32{1, 2, 3, 4, 5, 6, 7, 8} // 2 layers x 2 kv heads x 2 entries
	for _, c := range []struct {
		sel  string
		want [][]float32
	}{
		{kvcache.SelectLayer, [][]float32{{4, 6}, {12, 14}}},
		{kvcache.SelectSequence, [][]float32{{16, 20}}},
		{"", [][]float32{{16, 20}}},
		{kvcache.SelectHead, [][]float32{{1, 2}, {3, 4}, {5, 6}, {7, 8}}},
	} {
		m := newMassState(h2oPolicy(t, c.sel), massShape{4, 2})
		if m.size(2) != 8 {
			t.Errorf("selection %q: a step's mass over 2 entries is %d, want 8", c.sel, m.size(2))
		}
		m.add(slices.Clone(rows), 1)
		if got := m.score(2); !slices.EqualFunc(got, c.want, slices.Equal) {
			t.Errorf("selection %q: scores %v, want %v", c.sel, got, c.want)
		}
	}
}

// h2oPolicy is an h2o policy of selection sel for mass state tests.
func h2oPolicy(t *testing.T, sel string) kvcache.Policy {
	t.Helper()
	p, err := kvcache.NewPolicy(kvcache.PolicySpec{Name: kvcache.PolicyH2O, BudgetTokens: 64, SinkTokens: 4, WindowTokens: kvcache.Unset, Selection: sel}, 16)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A list per layer (lanes folding a layer's KV heads) becomes a list per layer and KV
// head, the layer's for each of its heads; one list or lanes of one row stay as they are.
func TestPerHeadKeep(t *testing.T) {
	a, b := []int{0, 2}, []int{1, 2}
	got := perHead([][]int{a, b}, 3)
	want := [][]int{a, a, a, b, b, b}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("2 layers of 3 kv heads: %v, want %v", got, want)
	}
	if got := perHead([][]int{a}, 4); len(got) != 1 {
		t.Errorf("one list: %v", got)
	}
	if got := perHead([][]int{a, b}, 1); !slices.EqualFunc(got, [][]int{a, b}, slices.Equal) {
		t.Errorf("lanes of one row: %v", got)
	}
}
