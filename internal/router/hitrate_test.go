package router

import (
	"context"
	"sync"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/bench"
)

// prefixWorkload is bench's prefix-repetition dataset: 8 prefixes of 40 words, each
// request one of them and 10 words of its own, 64 requests in a shuffled order.
func prefixWorkload(t *testing.T) []bench.SampleRequest {
	t.Helper()
	b, err := bench.NewPromptBuilder(context.Background(), nil, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := bench.LoadDataset(context.Background(), bench.DatasetConfig{Name: bench.DatasetPrefixRepetition,
		NumPrompts: 64, Seed: 1, PrefixLen: 40, SuffixLen: 10, NumPrefixes: 8, PrefixOut: 2}, b)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// hitRate replays the workload against url, four requests at a time, each with the cache
// salt given (so that runs do not share cache entries), and returns the prefix-cache hit
// rate the instances report over the run: hit tokens over looked-up tokens.
func hitRate(t *testing.T, url, salt string, reqs []bench.SampleRequest, ins []*instance) float64 {
	t.Helper()
	var q0, h0 int64
	for _, in := range ins {
		s := in.eng.Stats()
		q0, h0 = q0+s.PrefixQueries, h0+s.PrefixHits
	}
	work := make(chan bench.SampleRequest)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				var c completion
				if err := tryPost(url+"/v1/completions", map[string]any{"prompt": r.Prompt, "max_tokens": r.OutputLen, "cache_salt": salt}, &c); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for _, r := range reqs {
		work <- r
	}
	close(work)
	wg.Wait()
	var q, h int64
	for _, in := range ins {
		s := in.eng.Stats()
		q, h = q+s.PrefixQueries, h+s.PrefixHits
	}
	return float64(h-h0) / float64(q-q0)
}

// TestPrefixRepetitionHitRate is issue 20's router criterion: with four instances behind
// the cache-aware router, the prefix-repetition workload's prefix-cache hit rate is at
// least 90% of what one instance alone achieves. Random routing, which scatters each
// prefix over the instances, is reported beside it.
func TestPrefixRepetitionHitRate(t *testing.T) {
	reqs := prefixWorkload(t)
	ins := []*instance{newInstance(t, 16384), newInstance(t, 16384), newInstance(t, 16384), newInstance(t, 16384)}
	single := hitRate(t, ins[0].ts.URL, "single", reqs, ins)
	_, aware := newTestRouter(t, Config{}, ins...)
	routed := hitRate(t, aware.URL, "cache_aware", reqs, ins)
	_, random := newTestRouter(t, Config{Policy: PolicyRandom}, ins...)
	scattered := hitRate(t, random.URL, "random", reqs, ins)
	t.Logf("prefix-cache hit rate: one instance %.3f, four cache-aware %.3f (%.1f%%), four random %.3f (%.1f%%)",
		single, routed, 100*routed/single, scattered, 100*scattered/single)
	if single < 0.5 {
		t.Fatalf("one instance hits only %.3f of the workload's prompt tokens: the workload shares too little", single)
	}
	if routed < 0.9*single {
		t.Fatalf("four cache-aware instances hit %.3f, under 90%% of one instance's %.3f", routed, single)
	}
}
