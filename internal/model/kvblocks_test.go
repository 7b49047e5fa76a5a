package model

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// decodeAt runs one decode step of token tok at position pos for a sequence with the given
// block table (its context pos+1 tokens) and returns its logits.
func decodeAt(t *testing.T, m *Model, kv *KVCache, table []int32, tok int32, pos int) []float32 {
	t.Helper()
	bs := kv.BlockSize
	b := &Batch{Tokens: []int32{tok}, Positions: []int32{int32(pos)},
		SlotMapping: []int32{table[pos/bs]*int32(bs) + int32(pos%bs)},
		Seqs:        []Seq{{BlockTable: table, QueryLen: 1, ContextLen: pos + 1}}, LogitsIndices: []int{0}}
	logits, err := m.Forward(b, kv)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

// TestKVBlocksMove: a prefilled sequence's blocks, read and written to other blocks of the
// same cache or of a second cache of the model, read back bit for bit, and the next decode
// step over the remapped block table gives the logits of the original table bit for bit
// (over empty blocks it gives others): whole with F32 and F16 caches, and split by tensor
// and by pipeline.
func TestKVBlocksMove(t *testing.T) {
	fm := maskTwin(t)
	c := fm.Config
	const bs = 4
	for _, tc := range []struct {
		p  Parallel
		dt quant.Type
	}{{Parallel{1, 1}, quant.F32}, {Parallel{1, 1}, quant.F16}, {Parallel{2, 1}, quant.F32}, {Parallel{1, 2}, quant.F16}} {
		t.Run(fmt.Sprintf("tp%d-pp%d/%s", tc.p.Tensor, tc.p.Pipeline, tc.dt), func(t *testing.T) {
			m := cpuModel(t, fm, tc.p, tc.dt)
			kv, err := m.NewKVCache(12, bs)
			if err != nil {
				t.Fatal(err)
			}
			other, err := m.NewKVCache(12, bs)
			if err != nil {
				t.Fatal(err)
			}
			elem := map[quant.Type]int{quant.F32: 4, quant.F16: 2}[tc.dt]
			if got, want := kv.BlockBytes(), 2*c.Layers*bs*c.KVHeads*c.HeadDim*elem; got != want {
				t.Fatalf("BlockBytes %d, want %d", got, want)
			}
			seqs := []seqRun{maskSeqs[0], {prompt: testTokens(6), table: []int32{3, 0}}}
			if _, err := m.Forward(batchFor(seqs, []int{0, 0}, []int{9, 6}, bs), kv); err != nil {
				t.Fatal(err)
			}
			from, moved := maskSeqs[0].table, []int32{10, 8, 11}
			data := make([]byte, len(from)*kv.BlockBytes())
			if err := kv.ReadBlocks(from, data); err != nil {
				t.Fatal(err)
			}
			fresh := decodeAt(t, m, other, moved, 77, 9) // before the blocks arrive
			for _, dst := range []*KVCache{kv, other} {
				if err := dst.WriteBlocks(moved, data); err != nil {
					t.Fatal(err)
				}
				back := make([]byte, len(data))
				if err := dst.ReadBlocks(moved, back); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(back, data) {
					t.Fatal("moved blocks read back other bytes")
				}
			}
			want := decodeAt(t, m, kv, from, 77, 9)
			for name, run := range map[string]struct {
				kv    *KVCache
				table []int32
			}{"same cache": {kv, moved}, "second cache": {other, moved}} {
				if got := decodeAt(t, m, run.kv, run.table, 77, 9); !slices.Equal(got, want) {
					t.Errorf("%s: decode over the moved blocks differs from the original table's (%.3g)", name, maxAbsDiff(got, want))
				}
			}
			if slices.Equal(fresh, want) {
				t.Errorf("decode over empty blocks gave the prefilled context's logits: the test shows nothing")
			}
		})
	}
}

// TestKVBlocksRefuse: bad block ids and buffer sizes are errors.
func TestKVBlocksRefuse(t *testing.T) {
	fm := maskTwin(t)
	for _, p := range []Parallel{{1, 1}, {2, 1}} {
		m := cpuModel(t, fm, p, quant.F32)
		kv, err := m.NewKVCache(4, 4)
		if err != nil {
			t.Fatal(err)
		}
		per := kv.BlockBytes()
		for name, err := range map[string]error{
			"negative id":  kv.ReadBlocks([]int32{-1}, make([]byte, per)),
			"id past end":  kv.WriteBlocks([]int32{4}, make([]byte, per)),
			"short buffer": kv.ReadBlocks([]int32{0, 1}, make([]byte, per)),
			"long buffer":  kv.WriteBlocks([]int32{0}, make([]byte, per+1)),
		} {
			if err == nil {
				t.Errorf("tp%d %s: accepted", p.Tensor, name)
			}
		}
		if err := kv.ReadBlocks(nil, nil); err != nil {
			t.Errorf("tp%d: reading no blocks: %v", p.Tensor, err)
		}
	}
}
