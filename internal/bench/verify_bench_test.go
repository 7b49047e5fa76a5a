package bench

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// BenchmarkVerifyStep times steps of 1, 1+4 and 1+7 tokens of the trained target at batch
// 1 after a 64-token prompt, every token's greedy id picked as the engine's greedy
// verification does: the steps whose ratio `bench generate --verify-len` reports.
// "alternated" runs one step of each kind per iteration, so that the machine's speed swings
// reach all alike, and reports the fastest and the median step of each kind and their
// ratios to the 1-token step (on a shared machine the fastest is the steadier figure), and
// the ratios of the process CPU time the kinds took;
// "tokens=N" runs one kind alone, for a CPU profile (-cpuprofile) of it.
func BenchmarkVerifyStep(b *testing.B) {
	fm, err := format.Open(testdata.Path(b, "models/trained/target"), format.Options{})
	if err != nil {
		b.Fatal(err)
	}
	l, err := kvasir.Load(fm, kvasir.Options{Threads: 2})
	if err != nil {
		fm.Close()
		b.Fatal(err)
	}
	defer l.Close()
	m := l.Model()
	const promptLen, bs = 64, model.DefaultBlockSize
	per := (promptLen + 16 + bs - 1) / bs
	kv, err := m.NewKVCache(per, bs)
	if err != nil {
		b.Fatal(err)
	}
	seqs := &verifySeqs{tokens: [][]int32{make([]int32, promptLen+16)}, tables: [][]int32{make([]int32, per)}}
	for j := range seqs.tokens[0] {
		seqs.tokens[0][j] = int32(7 * j % m.Config().VocabSize)
	}
	for j := range seqs.tables[0] {
		seqs.tables[0][j] = int32(j)
	}
	pre := seqs.batch(0, promptLen)
	pre.LogitsIndices = nil
	if _, err := m.Forward(pre, kv); err != nil {
		b.Fatal(err)
	}
	qs := []int{1, 5, 8}
	steps := make([]*model.Batch, len(qs))
	for i, q := range qs {
		steps[i] = seqs.batch(promptLen, q)
	}
	b.Run("alternated", func(b *testing.B) {
		times := make([][]time.Duration, len(qs))
		cpu := make([]time.Duration, len(qs))
		for b.Loop() {
			for i, st := range steps {
				c0, _ := ProcessCPU()
				t0 := time.Now()
				if _, err := m.ForwardGreedy(st, kv, nil); err != nil {
					b.Fatal(err)
				}
				times[i] = append(times[i], time.Since(t0))
				c1, _ := ProcessCPU()
				cpu[i] += c1 - c0
			}
		}
		var best, med []float64
		for i, q := range qs {
			ts := times[i]
			slices.Sort(ts)
			best = append(best, float64(ts[0].Microseconds()))
			med = append(med, float64(ts[len(ts)/2].Microseconds()))
			b.ReportMetric(best[i], fmt.Sprintf("best-us/%d", q))
			if i > 0 {
				b.ReportMetric(best[i]/best[0], fmt.Sprintf("best-x/%d", q))
				b.ReportMetric(med[i]/med[0], fmt.Sprintf("median-x/%d", q))
				b.ReportMetric(float64(cpu[i])/float64(cpu[0]), fmt.Sprintf("cpu-x/%d", q))
			}
		}
	})
	for i, q := range qs {
		b.Run(fmt.Sprintf("tokens=%d", q), func(b *testing.B) {
			for b.Loop() {
				if _, err := m.ForwardGreedy(steps[i], kv, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
