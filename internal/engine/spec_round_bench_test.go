package engine

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// roundLog is a SpecPolicy that drafts K tokens for every candidate (as "dynamic": false
// does) and records each step's measured costs and the wall time between the ends of
// consecutive steps, so that a step's cycle splits into its draft phase, its target pass
// and the rest (the loop's host work and the hand-offs between the goroutines).
type roundLog struct {
	k     int
	mu    sync.Mutex
	last  time.Time
	steps []roundStep
}

type roundStep struct {
	cost  StepCost
	cycle time.Duration // since the end of the step before (0 for the first)
}

func (r *roundLog) DraftLens(_ int, cands []SpecCandidate, lens []int) {
	for i, c := range cands {
		lens[i] = max(0, min(r.k, c.MaxLen))
	}
}
func (r *roundLog) Verified(string, int, int) {}
func (r *roundLog) Done(string)               {}
func (r *roundLog) Stepped(c StepCost) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var cycle time.Duration
	if !r.last.IsZero() {
		cycle = now.Sub(r.last)
	}
	r.last = now
	r.steps = append(r.steps, roundStep{c, cycle})
}

// BenchmarkSpecRoundEngine runs the trained pair through the engine at batch 1 (one
// request at a time, 8 passages of held-out Tiny Shakespeare as prompts, 64 tokens each,
// greedy) without speculation and with the draft model at K = 1..8 fixed, and splits the
// wall time of the decode steps: per verifying step its draft phase, its target pass and
// the rest of its cycle; per plain decode step its pass and the rest. It reports, in ms
// per output token, what each costs, so that the engine's own overhead per round (the
// cycle less the two passes) shows beside the passes the step-cost benchmarks time.
func BenchmarkSpecRoundEngine(b *testing.B) {
	open := func(name string) *format.Model {
		fm, err := format.Open(testdata.Path(b, "models/trained/"+name), format.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { fm.Close() })
		return fm
	}
	tfm, dfm := open("target"), open("draft")
	bes := cpuBackends(b, 2, model.Parallel{})
	tm, err := model.New(tfm, model.Options{Backends: bes, KVCacheDType: quant.F16})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(tm.Close)
	dm, err := model.New(dfm, model.Options{Backends: bes, KVCacheDType: quant.F16})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(dm.Close)
	tok, err := tokenizer.New(tfm.Vocab)
	if err != nil {
		b.Fatal(err)
	}
	text, err := os.ReadFile(testdata.Path(b, "corpus/tinyshakespeare_input.txt"))
	if err != nil {
		b.Fatal(err)
	}
	tail := string(text[len(text)-56000:])
	var prompts []string
	for _, p := range strings.Split(tail, "\n\n") {
		if len(p) > 200 && len(prompts) < 8 {
			prompts = append(prompts, p[:min(len(p), 400)])
		}
	}
	for _, k := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			log := &roundLog{k: k}
			cfg := Config{NumBlocks: 257, BlockSize: 16}
			if k > 0 {
				cfg.Speculation = &Speculation{K: k, DraftModel: dm, Policy: log}
			} else {
				// A policy is only asked with speculation on; time plain steps with a
				// draft model that never drafts.
				log.k = 0
				cfg.Speculation = &Speculation{K: 1, DraftModel: dm, Policy: log}
			}
			e, err := New(tm, tok, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			out := 0
			for b.Loop() {
				for _, p := range prompts {
					log.mu.Lock()
					log.last = time.Time{}
					log.mu.Unlock()
					res := generate(b, e, []Request{{Prompt: p, Params: SamplingParams{MaxTokens: 64, IgnoreEOS: true}}})
					out += len(res[0][0].tokens) - 1 // the first token is the prefill's
				}
			}
			var draft, target, rest, plainT, plainRest time.Duration
			verifies := 0
			for _, s := range log.steps {
				if s.cycle == 0 {
					continue // a request's prefill step
				}
				if s.cost.DraftPasses > 0 {
					verifies++
					draft += s.cost.Draft
					target += s.cost.Target
					rest += s.cycle - s.cost.Draft - s.cost.Target
				} else {
					plainT += s.cost.Target
					plainRest += s.cycle - s.cost.Target
				}
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(max(out, 1)) }
			b.ReportMetric(per(draft+target+rest+plainT+plainRest), "ms/token")
			b.ReportMetric(per(draft), "draft-ms/token")
			b.ReportMetric(per(target+plainT), "target-ms/token")
			b.ReportMetric(per(rest+plainRest), "rest-ms/token")
			b.ReportMetric(float64(verifies)/float64(max(b.N, 1)), "verifies/op")
		})
	}
}
