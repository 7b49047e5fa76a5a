package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// BenchmarkSpecRound times, at batch 1 after a 64-token prompt, the parts of a speculative
// round of the trained pair as the engine runs them one after the other. Each iteration
// runs a warm-up and 3 timed decode steps of the target (plain decoding's steps follow
// each other), then for each K = 1..8 a round: K one-token steps of the draft model and
// the target's verify step of 1+K tokens, every token's greedy id picked. The draft runs
// on the target's worker pool (draft=pool2, as the engine binds it), on a pool of one
// thread of its own (draft=pool1), or, with KVASIR_SPEC_DRAFT naming another draft file
// of the target's vocabulary (a Q8_0 GGUF of the trained draft, say), that one on the
// target's pool (draft=file). It reports the decode step's median wall time and mean
// process CPU time (µs), and the verify steps' and the draft steps' ratios to it (median
// wall time, mean CPU time; a draft step's over the K passes of its round): the step costs from which, with the acceptance `bench offline`
// measures, a round's speedup is predicted. "draft-alone" runs the draft's step alone,
// for a CPU profile (-cpuprofile).
func BenchmarkSpecRound(b *testing.B) {
	open := func(name string, opt kvasir.Options) *kvasir.Loaded {
		path := name
		if !filepath.IsAbs(name) {
			path = testdata.Path(b, "models/trained/"+name)
		}
		fm, err := format.Open(path, format.Options{})
		if err != nil {
			b.Fatal(err)
		}
		l, err := kvasir.Load(fm, opt)
		if err != nil {
			fm.Close()
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return l
	}
	be, err := cpubackend.NewKernels(2, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	bes := []backend.Backend{be}
	target := open("target", kvasir.Options{Backends: bes})
	shared := open("draft", kvasir.Options{Backends: bes})
	own := open("draft", kvasir.Options{Threads: 1})

	const promptLen, bs = 64, model.DefaultBlockSize
	per := (promptLen + 16 + bs - 1) / bs
	seqs := &verifySeqs{tokens: [][]int32{make([]int32, promptLen+16)}, tables: [][]int32{make([]int32, per)}}
	for j := range seqs.tokens[0] {
		seqs.tokens[0][j] = int32(7 * j % target.Model().Config().VocabSize)
	}
	for j := range seqs.tables[0] {
		seqs.tables[0][j] = int32(j)
	}
	prefill := func(l *kvasir.Loaded) *model.KVCache {
		kv, err := l.Model().NewKVCache(per, bs)
		if err != nil {
			b.Fatal(err)
		}
		pre := seqs.batch(0, promptLen)
		pre.LogitsIndices = nil
		if _, err := l.Model().Forward(pre, kv); err != nil {
			b.Fatal(err)
		}
		return kv
	}
	tkv, skv, okv := prefill(target), prefill(shared), prefill(own)
	type draftKind struct {
		name string
		l    *kvasir.Loaded
		kv   *model.KVCache
	}
	drafts := []draftKind{{"pool2", shared, skv}, {"pool1", own, okv}}
	if f := os.Getenv("KVASIR_SPEC_DRAFT"); f != "" {
		// Another draft of the target's vocabulary (a Q8_0 GGUF of the trained draft, say),
		// on the shared pool.
		l := open(f, kvasir.Options{Backends: bes})
		drafts = append(drafts, draftKind{"file", l, prefill(l)})
	}
	decode := seqs.batch(promptLen, 1)
	// A part's time: its wall times and the process CPU time it took.
	type part struct {
		wall []time.Duration
		cpu  time.Duration
	}
	timed := func(p *part, m *model.Model, kv *model.KVCache, st *model.Batch) {
		c0, _ := ProcessCPU()
		t0 := time.Now()
		if _, err := m.ForwardGreedy(st, kv, nil); err != nil {
			b.Fatal(err)
		}
		p.wall = append(p.wall, time.Since(t0))
		c1, _ := ProcessCPU()
		p.cpu += c1 - c0
	}
	med := func(p *part) float64 {
		ts := slices.Clone(p.wall)
		slices.Sort(ts)
		return float64(ts[len(ts)/2].Nanoseconds()) / 1e3
	}
	mean := func(p *part) float64 { return float64(p.cpu.Nanoseconds()) / 1e3 / float64(len(p.wall)) }
	for _, draft := range drafts {
		b.Run("draft="+draft.name, func(b *testing.B) {
			// Each iteration: 3 decode steps after a warm-up one (plain decoding's steps
			// follow each other), then for each K a round of K draft passes and a verify
			// step of 1+K tokens.
			const maxK = 8
			var dec part
			drafts, verifies := make([]part, maxK+1), make([]part, maxK+1)
			for b.Loop() {
				var warm part
				timed(&warm, target.Model(), tkv, decode)
				for range 3 {
					timed(&dec, target.Model(), tkv, decode)
				}
				for k := 1; k <= maxK; k++ {
					for range k {
						timed(&drafts[k], draft.l.Model(), draft.kv, decode)
					}
					timed(&verifies[k], target.Model(), tkv, seqs.batch(promptLen, 1+k))
				}
			}
			dw, dc := med(&dec), mean(&dec)
			b.ReportMetric(dw, "wall-us/decode")
			b.ReportMetric(dc, "cpu-us/decode")
			for k := 1; k <= maxK; k++ {
				b.ReportMetric(med(&verifies[k])/dw, fmt.Sprintf("wall-x/verify%d", k))
				b.ReportMetric(mean(&verifies[k])/dc, fmt.Sprintf("cpu-x/verify%d", k))
				b.ReportMetric(med(&drafts[k])/dw, fmt.Sprintf("wall-x/draftK%d", k))
				b.ReportMetric(mean(&drafts[k])/dc, fmt.Sprintf("cpu-x/draftK%d", k))
			}
		})
	}
	// For a CPU profile (-cpuprofile) of the draft's steps alone, on the shared pool.
	b.Run("draft-alone", func(b *testing.B) {
		for b.Loop() {
			if _, err := shared.Model().ForwardGreedy(decode, skv, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
