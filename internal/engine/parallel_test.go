package engine

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/model"
)

// TestParallelEngine: the engine on a model split by tensor (2 and 4 ranks), by pipeline
// (2 stages) and both gives every request the tokens of the whole model run one request
// at a time, through batching, prefix hits and preemption; and afterwards every block is
// back in the one allocator that numbers the blocks of all ranks' cache parts.
func TestParallelEngine(t *testing.T) {
	tm := newTinyModel(t)
	vocab := tm.m.Config().VocabSize
	reqs := workload(24, vocab)
	ref := sequential(t, tm.engine(t, Config{DisablePrefixCaching: true, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 1}}), reqs)
	for _, p := range []model.Parallel{{Tensor: 2, Pipeline: 1}, {Tensor: 4, Pipeline: 1}, {Tensor: 1, Pipeline: 2}, {Tensor: 2, Pipeline: 2}} {
		t.Run(fmt.Sprintf("tp%d-pp%d", p.Tensor, p.Pipeline), func(t *testing.T) {
			m, err := model.New(tm.fm, model.Options{Backends: cpuBackends(t, 2, p), Parallel: p})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			split := &tinyModel{fm: tm.fm, m: m, tok: tm.tok}
			cfg := Config{NumBlocks: 24, BlockSize: 8, SchedulerConfig: SchedulerConfig{MaxNumSeqs: 16}}
			e := split.engine(t, cfg)
			got := generate(t, e, reqs)
			for i := range reqs {
				if !slices.Equal(got[i][0].tokens, ref[i][0].tokens) {
					t.Errorf("request %d: tokens %v, want %v", i, got[i][0].tokens, ref[i][0].tokens)
				}
			}
			waitIdle(t, e)
			if err := e.kv.Check(); err != nil {
				t.Fatal(err)
			}
			st := e.Stats()
			if st.UsedBlocks != 0 || st.Preemptions == 0 || st.PrefixHits == 0 {
				t.Errorf("blocks in use %d (want 0), preemptions %d, prefix hits %d (want both > 0)", st.UsedBlocks, st.Preemptions, st.PrefixHits)
			}
			specs := e.model.(*pagedModel).kv.Specs()
			if len(specs) != p.Ranks() {
				t.Fatalf("%d cache parts for %d ranks", len(specs), p.Ranks())
			}
			for r, s := range specs {
				if s.NumBlocks != cfg.NumBlocks || s.BlockSize != cfg.BlockSize {
					t.Errorf("rank %d: cache part of %d blocks of %d, the allocator has %d of %d", r, s.NumBlocks, s.BlockSize, cfg.NumBlocks, cfg.BlockSize)
				}
			}
		})
	}
}
