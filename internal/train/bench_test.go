package train

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
)

// BenchmarkTrainStep times one hard-label step of a student the size of a speculative
// draft for the trained 8192-token target: 2 layers, dim 128, 8 windows of 128 tokens.
func BenchmarkTrainStep(b *testing.B) {
	p := cpu.NewPool(0)
	defer p.Close()
	c, _ := ParseConfigBytes([]byte(`{"dim":128,"layers":2,"heads":4,"kv_heads":2,"hidden":384,"ctx":128}`))
	c.Vocab = 8192
	m, _ := NewModel(c, 1)
	opt := trainOptions(1000, 1)
	opt.Batch = 8
	tr, err := NewTrainer(m, patternData(c.Vocab, 64, c.Ctx), opt, p)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		tr.TrainStep()
	}
	b.ReportMetric(float64(b.N*opt.Batch*c.Ctx)/b.Elapsed().Seconds(), "tokens/s")
}
