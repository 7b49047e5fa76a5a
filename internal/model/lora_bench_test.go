package model

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/lora"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// BenchmarkLoRADecode times a decode step of 16 sequences of the trained 25M-parameter
// target: of the base, with one rank-16 adapter on every projection of every sequence, and
// with four such adapters, four sequences each.
func BenchmarkLoRADecode(b *testing.B) {
	fm, err := format.Open(testdata.Path(b, "models/trained/target"), format.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer fm.Close()
	m, err := New(fm, Options{Backends: cpuBackends(b, 2, Parallel{})})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.EnableLoRA(4, 16); err != nil {
		b.Fatal(err)
	}
	kv, err := m.NewKVCache(16*4+1, 16)
	if err != nil {
		b.Fatal(err)
	}
	var as []*lora.Adapter
	for i := range 4 {
		as = append(as, lora.Random(fm.Config, 16, 32, []lora.Target{lora.Q, lora.K, lora.V, lora.O, lora.Gate, lora.Up, lora.Down}, 0.02, uint64(i+1)))
	}
	for _, tc := range []struct {
		name     string
		adapters []*lora.Adapter
	}{{"base", nil}, {"lora16x1", as[:1]}, {"lora16x4", as}} {
		b.Run(tc.name, func(b *testing.B) {
			batch := &Batch{}
			for i := range 16 {
				table := []int32{int32(4*i + 1), int32(4*i + 2), int32(4*i + 3), int32(4*i + 4)}
				batch.Tokens = append(batch.Tokens, int32(10+i))
				batch.Positions = append(batch.Positions, 40)
				batch.SlotMapping = append(batch.SlotMapping, table[2]*16+8)
				var a *lora.Adapter
				if len(tc.adapters) > 0 {
					a = tc.adapters[i%len(tc.adapters)]
				}
				batch.Seqs = append(batch.Seqs, Seq{BlockTable: table, QueryStart: i, QueryLen: 1, ContextLen: 41, Adapter: a})
				batch.LogitsIndices = append(batch.LogitsIndices, i)
			}
			for b.Loop() {
				if _, err := m.Forward(batch, kv); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
