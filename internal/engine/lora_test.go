package engine

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/lora"
)

// loraStories is stories260K with LoRA enabled (slots of rank 64) and two registered
// random adapters of ranks 8 and 64.
func loraStories(t *testing.T, slots int) (*tinyModel, *lora.Adapter, *lora.Adapter) {
	t.Helper()
	tm := storiesModel(t)
	if err := tm.m.EnableLoRA(slots, 64); err != nil {
		t.Fatal(err)
	}
	c := tm.fm.Config
	reg := lora.NewRegistry(c, 64)
	a8 := lora.Random(c, 8, 16, []lora.Target{lora.Q, lora.K, lora.V, lora.O, lora.Gate, lora.Up, lora.Down}, 0.08, 1)
	a64 := lora.Random(c, 64, 32, []lora.Target{lora.Q, lora.V, lora.Down}, 0.04, 2)
	if err := reg.Add("r8", a8); err != nil {
		t.Fatal(err)
	}
	if err := reg.Add("r64", a64); err != nil {
		t.Fatal(err)
	}
	return tm, a8, a64
}

// TestLoRARequests: requests of the base and of two adapters on one prompt, run together,
// give what each gives alone on an engine without a prefix cache; run one after another
// with the prefix cache, each still gives its own (the cache is salted by adapter, so the
// adapters never take the base's blocks or each other's); and with MaxLoRAs 1 the
// adapters' requests take turns (never two adapters running) with the same outputs.
func TestLoRARequests(t *testing.T) {
	tm, a8, a64 := loraStories(t, 2)
	prompt := randomPrompt(3, 40, tm.fm.Config.VocabSize)
	adapters := []*lora.Adapter{nil, a8, a64}
	reqs := make([]Request, len(adapters))
	for i, a := range adapters {
		reqs[i] = Request{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 16, Temperature: 0}, Adapter: a}
	}
	// Each alone, no prefix cache.
	want := make([][]int32, len(reqs))
	e := tm.engine(t, Config{DisablePrefixCaching: true, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 8, MaxNumBatchedTokens: 256, MaxLoRAs: 2}})
	for i, r := range reqs {
		want[i] = generate(t, e, []Request{r})[0][0].tokens
	}
	if slices.Equal(want[0], want[1]) || slices.Equal(want[0], want[2]) {
		t.Fatalf("the adapters leave the base's greedy tokens unchanged: %v %v %v", want[0], want[1], want[2])
	}
	check := func(what string, got [][]result) {
		t.Helper()
		for i := range reqs {
			if !slices.Equal(got[i][0].tokens, want[i]) {
				t.Errorf("%s: request %d (%v): %v, alone %v", what, i, adapters[i] != nil, got[i][0].tokens, want[i])
			}
		}
	}
	// Together, with the prefix cache.
	e = tm.engine(t, Config{SchedulerConfig: SchedulerConfig{MaxNumSeqs: 8, MaxNumBatchedTokens: 256, MaxLoRAs: 2}})
	check("together", generate(t, e, reqs))
	waitIdle(t, e)
	// One after another: the base's cached prompt blocks are not the adapters'.
	var seq [][]result
	for _, r := range reqs {
		seq = append(seq, generate(t, e, []Request{r})[0])
	}
	check("in turn, prefix cache warm", seq)
	if s := e.Stats(); s.PrefixHits == 0 {
		t.Error("no prefix-cache hits: a request never reused its own adapter's blocks")
	}
	// One adapter at a time.
	var maxRunning atomic.Int64 // written on the engine loop
	e = tm.engineWithHook(t, Config{BlockSize: 16, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 8, MaxNumBatchedTokens: 256, MaxLoRAs: 1}}, func(e *Engine) {
		if n := int64(len(adapterNames(e.sched.running))); n > maxRunning.Load() {
			maxRunning.Store(n)
		}
	})
	check("max-loras 1", generate(t, e, reqs))
	if n := maxRunning.Load(); n != 1 {
		t.Errorf("at most %d adapters ran at once, want 1", n)
	}
	waitIdle(t, e)
	if s := e.Stats(); len(s.RunningLoRAs) != 0 || len(s.WaitingLoRAs) != 0 {
		t.Errorf("idle engine reports adapters %v %v", s.RunningLoRAs, s.WaitingLoRAs)
	}
}

// TestLoRAStatsNames: the stats name the adapters of running and waiting sequences.
func TestLoRAStatsNames(t *testing.T) {
	a, b := &lora.Adapter{Name: "b"}, &lora.Adapter{Name: "a"}
	var seqs []*sequence
	for i, ad := range []*lora.Adapter{a, nil, b, a} {
		seqs = append(seqs, &sequence{id: kvcache.RequestID(fmt.Sprint(i)), req: &request{adapter: ad}})
	}
	if got := adapterNames(seqs); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("names %v", got)
	}
}
