package engine

import (
	"slices"
	"sync"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// TestKVPoliciesMLA: the KV policies on an MLA model (deepseek-v2-tiny: one [kr | c]
// vector a token and layer, so a lane per layer): with a budget the sequence never
// reaches each generates full attention's greedy tokens; with a budget of 64 each drops
// tokens (streaming whole blocks, h2o and snapkv single tokens by the attention mass of
// the latent attention, per sequence and per lane) and still agrees with full attention
// up to its first drop, stays within its budget (checkEngine), and gives every block back.
// model.TestCompactKeysMLA checks the compacted cache itself against a recomputation.
func TestKVPoliciesMLA(t *testing.T) {
	shape, err := synth.Lookup("deepseek-v2-tiny")
	if err != nil {
		t.Fatal(err)
	}
	shape.Config.Layers = 2
	fm, err := synth.Model(shape, quant.F32, 11)
	if err != nil {
		t.Fatal(err)
	}
	tm := bindModel(t, fm, quant.F32)
	prompt := randomPrompt(5, 20, fm.Config.VocabSize)
	var mu sync.Mutex
	var broken error
	e := tm.engineWithHook(t, Config{}, func(e *Engine) {
		mu.Lock()
		defer mu.Unlock()
		if broken == nil {
			broken = checkEngine(e)
		}
	})
	const budget, long = 64, 200
	type variant struct{ name, selection string }
	variants := []variant{{kvcache.PolicyStreaming, ""}}
	for _, n := range []string{kvcache.PolicyH2O, kvcache.PolicySnapKV} {
		for _, sel := range []string{kvcache.SelectSequence, kvcache.SelectHead} {
			variants = append(variants, variant{n, sel})
		}
	}
	for _, v := range variants {
		name := v.name + " " + v.selection
		spec := func(b int) *kvcache.PolicySpec {
			window := 16
			if v.name == kvcache.PolicyStreaming {
				window = kvcache.Unset
			}
			return &kvcache.PolicySpec{Name: v.name, BudgetTokens: b, SinkTokens: 4, WindowTokens: window, Selection: v.selection}
		}
		res := generate(t, e, []Request{
			{PromptTokens: prompt, Params: SamplingParams{MaxTokens: long, IgnoreEOS: true}},
			{PromptTokens: prompt, Params: SamplingParams{MaxTokens: long, IgnoreEOS: true}, KVPolicy: spec(256)},
			{PromptTokens: prompt, Params: SamplingParams{MaxTokens: long, IgnoreEOS: true}, KVPolicy: spec(budget)},
		})
		full, wide, narrow := res[0][0].tokens, res[1][0].tokens, res[2][0].tokens
		if !slices.Equal(wide, full) {
			t.Errorf("%s with budget 256 differs from full attention:\n%v\n%v", name, wide, full)
		}
		same := budget - len(prompt)
		if len(narrow) != long || !slices.Equal(narrow[:same], full[:same]) {
			t.Errorf("%s with budget %d: %d tokens, first %d %v, want %d tokens starting %v", name, budget, len(narrow), same, narrow[:min(same, len(narrow))], long, full[:same])
		}
		if slices.Equal(narrow, full) {
			t.Errorf("%s with budget %d never left full attention: the test shows nothing", name, budget)
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
}
