package engine

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// BenchmarkDecode32 measures steps of 32 concurrent decodes on a synthesized smollm2-135m
// Q8_0 (reported per generated token).
func BenchmarkDecode32(b *testing.B) {
	shape, err := synth.Lookup("smollm2-135m")
	if err != nil {
		b.Fatal(err)
	}
	fm, err := synth.Model(shape, quant.Q8_0, 1)
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.New(fm, model.Options{Backends: cpuBackends(b, 0, model.Parallel{})})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	tok, err := tokenizer.New(fm.Vocab)
	if err != nil {
		b.Fatal(err)
	}
	e, err := New(m, tok, Config{NumBlocks: 200, MaxModelLen: 2048})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	reqs := make([]Request, 32)
	for i := range reqs {
		reqs[i] = Request{PromptTokens: randomPrompt(i, 16, 1000), Params: SamplingParams{MaxTokens: 16, IgnoreEOS: true}}
	}
	b.ResetTimer()
	for range b.N {
		generate(b, e, reqs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*32*16)/1e6, "ms/token")
}
