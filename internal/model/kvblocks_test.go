package model

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
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

// TestAfterLayerHook: a step's AfterLayer hook is called once per layer, in order, after
// that layer wrote the step's keys and values and before the next layer wrote any: the
// rows it reads are the layer's part of what the blocks hold after the step, while the
// next layer's part of them is still what it was before. The step's logits are those of
// a step without the hook, bit for bit.
func TestAfterLayerHook(t *testing.T) {
	fm := maskTwin(t)
	const bs = 4
	seqs := []seqRun{maskSeqs[0], {prompt: testTokens(6), table: []int32{3, 0}}}
	blocks := []int32{7, 1, 3} // the full blocks of both prompts after the step
	for _, dt := range []quant.Type{quant.F32, quant.F16} {
		t.Run(dt.String(), func(t *testing.T) {
			m := cpuModel(t, fm, Parallel{1, 1}, dt)
			if !m.StreamsLayers() {
				t.Fatal("a CPU model that is not split does not stream layers")
			}
			kv, err := m.NewKVCache(12, bs)
			if err != nil {
				t.Fatal(err)
			}
			plain, err := m.NewKVCache(12, bs)
			if err != nil {
				t.Fatal(err)
			}
			lb := kv.LayerBlockBytes()
			if lb*fm.Config.Layers != kv.BlockBytes() {
				t.Fatalf("LayerBlockBytes %d x %d layers != BlockBytes %d", lb, fm.Config.Layers, kv.BlockBytes())
			}
			zero := make([]byte, len(blocks)*lb)
			lr := m.ranks[0].be.(backend.LayerKVReader)
			var got [][]byte
			b := batchFor(seqs, []int{0, 0}, []int{9, 6}, bs)
			b.AfterLayer = func(piece LayerPiece, read LayerReader) error {
				layer := piece.Layer
				if piece.Rank != 0 || piece.Offset != layer*lb || piece.Bytes != lb {
					return fmt.Errorf("layer %d: piece %+v of an unsplit model", layer, piece)
				}
				if layer != len(got) {
					return fmt.Errorf("layer %d after %d layers", layer, len(got))
				}
				rows := make([]byte, len(blocks)*lb)
				wait, err := read(blocks, rows)
				if err == nil {
					err = wait()
				}
				if err != nil {
					return err
				}
				got = append(got, rows)
				if layer+1 < fm.Config.Layers {
					// The CPU copies at once: what the next layer holds now.
					next := make([]byte, len(rows))
					if _, err := lr.ReadLayerBlocks(kv.parts[0], layer+1, blocks, next); err != nil {
						return err
					}
					if !bytes.Equal(next, zero) {
						return fmt.Errorf("layer %d's keys and values written before layer %d's hook", layer+1, layer)
					}
				}
				return nil
			}
			logits, err := m.Forward(b, kv)
			if err != nil {
				t.Fatal(err)
			}
			b.AfterLayer = nil
			want, err := m.Forward(b, plain)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(logits, want) {
				t.Fatal("a step with the hook gives other logits")
			}
			if len(got) != fm.Config.Layers {
				t.Fatalf("hook called for %d layers of %d", len(got), fm.Config.Layers)
			}
			whole := make([]byte, len(blocks)*kv.BlockBytes())
			if err := kv.ReadBlocks(blocks, whole); err != nil {
				t.Fatal(err)
			}
			for l, rows := range got {
				for i := range blocks {
					if !bytes.Equal(rows[i*lb:][:lb], whole[i*kv.BlockBytes()+l*lb:][:lb]) {
						t.Fatalf("layer %d of block %d: the hook's rows differ from the block's after the step", l, blocks[i])
					}
				}
			}
		})
	}
}

// TestAfterLayerHookSplit: on a model split by tensor, by pipeline or by both, every rank
// calls the hook once for each of its layers' pieces (KVCache.LayerPieces, which tile a
// block), and the bytes it reads are that piece of what the blocks hold after the step (in
// the layout of ReadBlocks), though the two sequences of the step run as two pipeline
// micro-batches; the logits are the unsplit model's.
func TestAfterLayerHookSplit(t *testing.T) {
	fm := maskTwin(t)
	const bs = 4
	seqs := []seqRun{maskSeqs[0], {prompt: testTokens(6), table: []int32{3, 0}}}
	blocks := []int32{7, 1, 3}
	whole := cpuModel(t, fm, Parallel{1, 1}, quant.F32)
	wkv, err := whole.NewKVCache(12, bs)
	if err != nil {
		t.Fatal(err)
	}
	want, err := whole.Forward(batchFor(seqs, []int{0, 0}, []int{9, 6}, bs), wkv)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Parallel{{2, 1}, {1, 2}, {2, 2}} {
		t.Run(fmt.Sprintf("tp%d-pp%d", p.Tensor, p.Pipeline), func(t *testing.T) {
			m := cpuModel(t, fm, p, quant.F32)
			if !m.StreamsLayers() {
				t.Fatal("a split CPU model does not stream layers")
			}
			kv, err := m.NewKVCache(12, bs)
			if err != nil {
				t.Fatal(err)
			}
			pieces := kv.LayerPieces()
			covered := 0
			for i, pc := range pieces {
				if pc.Offset != covered {
					t.Fatalf("piece %d %+v does not follow on at %d", i, pc, covered)
				}
				covered += pc.Bytes
			}
			if covered != kv.BlockBytes() || len(pieces) != p.Tensor*fm.Config.Layers {
				t.Fatalf("%d pieces cover %d bytes of a block of %d", len(pieces), covered, kv.BlockBytes())
			}
			var mu sync.Mutex
			got := map[LayerPiece][]byte{}
			b := batchFor(seqs, []int{0, 0}, []int{9, 6}, bs)
			b.AfterLayer = func(piece LayerPiece, read LayerReader) error {
				rows := make([]byte, len(blocks)*piece.Bytes)
				wait, err := read(blocks, rows)
				if err == nil {
					err = wait()
				}
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if _, ok := got[piece]; ok {
					return fmt.Errorf("piece %+v twice", piece)
				}
				got[piece] = rows
				return nil
			}
			logits, err := m.Forward(b, kv)
			if err != nil {
				t.Fatal(err)
			}
			// float32 rounding apart (TestParallelMatchesWhole).
			if e := relErr([][]float32{logits}, [][]float32{want}); e > 1e-5 {
				t.Fatalf("the split model's step with the hook gives logits %.3g off the unsplit model's", e)
			}
			if len(got) != len(pieces) {
				t.Fatalf("hook called for %d pieces of %d", len(got), len(pieces))
			}
			bb := kv.BlockBytes()
			all := make([]byte, len(blocks)*bb)
			if err := kv.ReadBlocks(blocks, all); err != nil {
				t.Fatal(err)
			}
			for _, pc := range pieces {
				rows, ok := got[pc]
				if !ok {
					t.Fatalf("piece %+v not reported", pc)
				}
				for i := range blocks {
					if !bytes.Equal(rows[i*pc.Bytes:][:pc.Bytes], all[i*bb+pc.Offset:][:pc.Bytes]) {
						t.Fatalf("piece %+v of block %d: the hook's bytes differ from the block's after the step", pc, blocks[i])
					}
				}
			}
		})
	}
}
