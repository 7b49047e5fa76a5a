package cudabackend_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// decodeStep runs one decode step of token 77 at position pos over table and returns its
// logits.
func decodeStep(t *testing.T, m *model.Model, kv *model.KVCache, table []int32, pos int) []float32 {
	t.Helper()
	bs := kv.BlockSize
	b := &model.Batch{Tokens: []int32{77}, Positions: []int32{int32(pos)},
		SlotMapping: []int32{table[pos/bs]*int32(bs) + int32(pos%bs)},
		Seqs:        []model.Seq{{BlockTable: table, QueryLen: 1, ContextLen: pos + 1}}, LogitsIndices: []int{0}}
	logits, err := m.Forward(b, kv)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

// readBlocks returns the bytes of blocks of kv.
func readBlocks(t *testing.T, kv *model.KVCache, blocks []int32) []byte {
	t.Helper()
	data := make([]byte, len(blocks)*kv.BlockBytes())
	if err := kv.ReadBlocks(blocks, data); err != nil {
		t.Fatal(err)
	}
	return data
}

// TestBackendKVBlocks: on the GPU, for F32, F16 and BF16 caches, a prefilled sequence's
// blocks read and written to other blocks (of the same cache and of a second one) read
// back bit for bit, and the next decode step over the remapped table gives the original
// table's logits bit for bit; a transfer of more blocks than the pinned staging buffer
// holds, in scattered order, reads back what was written.
func TestBackendKVBlocks(t *testing.T) {
	const bs = 16
	for _, kvType := range []string{"f32", "f16", "bf16"} {
		be := newBackend(t)
		m, _ := synthModel(t, be, kvType)
		c := m.Config()
		kv, err := m.NewKVCache(64, bs)
		if err != nil {
			t.Fatal(err)
		}
		other, err := m.NewKVCache(64, bs)
		if err != nil {
			t.Fatal(err)
		}
		elem := map[string]int{"f32": 4, "f16": 2, "bf16": 2}[kvType]
		if got, want := kv.BlockBytes(), 2*c.Layers*bs*c.KVHeads*c.HeadDim*elem; got != want {
			t.Fatalf("%s: BlockBytes %d, want %d", kvType, got, want)
		}
		if _, err := m.Forward(stepBatch([]int{20, 9}, bs), kv); err != nil {
			t.Fatal(err)
		}
		from, moved := []int32{0, 1}, []int32{40, 13}
		data := readBlocks(t, kv, from)
		fresh := decodeStep(t, m, other, moved, 20)
		for _, dst := range []*model.KVCache{kv, other} {
			if err := dst.WriteBlocks(moved, data); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readBlocks(t, dst, moved), data) {
				t.Fatalf("%s: moved blocks read back other bytes", kvType)
			}
		}
		want := decodeStep(t, m, kv, from, 20)
		same := slices.Equal(decodeStep(t, m, kv, moved, 20), want) && slices.Equal(decodeStep(t, m, other, moved, 20), want)
		if !same {
			t.Errorf("%s: decode over moved blocks differs from the original table's", kvType)
		}
		if slices.Equal(fresh, want) {
			t.Errorf("%s: decode over empty blocks gave the prefilled context's logits", kvType)
		}
		fmt.Printf("RESULT|model|%s KV: blocks moved (same cache, second cache) then decoded|%v|bit-identical logits\n", kvType, same)
	}

	// More blocks than the 64 MiB staging buffer holds (F32 blocks of 128 KiB: 512 a chunk).
	be := newBackend(t)
	m, _ := synthModel(t, be, "f32")
	kv, err := m.NewKVCache(1100, bs)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(13, 14))
	order := make([]int32, 1100)
	for i := range order {
		order[i] = int32(i)
	}
	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	slices.Sort(order[100:400]) // long runs of consecutive ids among scattered ones
	data := make([]byte, len(order)*kv.BlockBytes())
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if err := kv.WriteBlocks(order, data); err != nil {
		t.Fatal(err)
	}
	back := readBlocks(t, kv, order)
	if !bytes.Equal(back, data) {
		t.Error("1100 blocks written in scattered order read back other bytes")
	}
	fmt.Printf("RESULT|model|1100 f32 blocks (%d MiB) written and read in scattered order|%v|bit-identical\n", len(data)>>20, bytes.Equal(back, data))
}

// TestBackendKVBlocksCPUAndGPU: a CPU cache and a GPU cache of F16 elements, and of each
// quantized type (int8, fp8_e4m3, fp8_e5m2: codes and scales), hold the same bytes for the
// same blocks: blocks prefilled on the CPU, written to the GPU, read back from it
// unchanged, and the GPU's next decode step over them gives the CPU's logits (up to the
// GPU's rounding; over empty blocks it does not); the same the other way round.
func TestBackendKVBlocksCPUAndGPU(t *testing.T) {
	for _, dt := range []quant.Type{quant.F16, quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2} {
		kvBlocksCPUAndGPU(t, dt)
	}
}

func kvBlocksCPUAndGPU(t *testing.T, dt quant.Type) {
	const bs, tol = 16, 2e-2
	gpuBe := newBackend(t)
	gpu, fm := synthModelKV(t, gpuBe, dt)
	cpuBe := cpubackend.New(4)
	t.Cleanup(func() { cpuBe.Close() })
	cpu, err := model.New(fm, model.Options{Backends: []backend.Backend{cpuBe}, KVCacheDType: dt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cpu.Close)
	table := []int32{0, 1}
	for _, dir := range []struct {
		name     string
		from, to *model.Model
	}{{"cpu to gpu", cpu, gpu}, {"gpu to cpu", gpu, cpu}} {
		src, err := dir.from.NewKVCache(8, bs)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := dir.to.NewKVCache(8, bs)
		if err != nil {
			t.Fatal(err)
		}
		if src.BlockBytes() != dst.BlockBytes() {
			t.Fatalf("%s %s: blocks of %d and %d bytes", dt, dir.name, src.BlockBytes(), dst.BlockBytes())
		}
		if _, err := dir.from.Forward(stepBatch([]int{20}, bs), src); err != nil {
			t.Fatal(err)
		}
		data := readBlocks(t, src, table)
		fresh := decodeStep(t, dir.to, dst, table, 20)
		if err := dst.WriteBlocks(table, data); err != nil {
			t.Fatal(err)
		}
		back := readBlocks(t, dst, table)
		if !bytes.Equal(back, data) {
			t.Errorf("%s %s: the blocks read back from the destination differ", dt, dir.name)
		}
		want := decodeStep(t, dir.from, src, table, 20)
		got := decodeStep(t, dir.to, dst, table, 20)
		e, eFresh := relErr(got, want), relErr(fresh, want)
		fmt.Printf("RESULT|model|%s KV blocks %s: decode logits vs the source's|%.2e|bytes equal %v, over empty blocks %.2e\n", dt, dir.name, e, bytes.Equal(back, data), eFresh)
		if !(e < tol) {
			t.Errorf("%s %s: decode over the moved blocks %.3g from the source's logits (relative), allowed %g", dt, dir.name, e, tol)
		}
		if !(eFresh > 10*tol) {
			t.Errorf("%s %s: decode over empty blocks only %.3g from the source's logits: the test shows nothing", dt, dir.name, eFresh)
		}
	}
}

// TestBackendAfterLayerHook: on the GPU, a step's per-layer hook (model.Batch.AfterLayer)
// reads each layer's part of blocks on the side stream while the next layers compute, and
// once its waits return the rows equal that layer's part of what the blocks hold after the
// step (ReadBlocks), for F32, F16 and BF16 caches and the quantized ones (codes and
// scales), over two steps, the second reading more blocks (the pinned staging grown); the
// step's logits are those of the same step without the hook, bit for bit.
func TestBackendAfterLayerHook(t *testing.T) {
	const bs = 16
	for _, kvType := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2} {
		be := newBackend(t)
		m, _ := synthModelKV(t, be, kvType)
		if !m.StreamsLayers() {
			t.Fatalf("%s: the CUDA model does not stream layers", kvType)
		}
		kv, err := m.NewKVCache(64, bs)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := m.NewKVCache(64, bs)
		if err != nil {
			t.Fatal(err)
		}
		layers, lb := m.Config().Layers, kv.LayerBlockBytes()
		for _, step := range []struct {
			lens   []int
			blocks []int32
		}{{[]int{20, 9}, []int32{0, 1, 4}}, {[]int{40, 33}, []int32{2, 0, 1, 4, 5, 6}}} {
			b := stepBatch(step.lens, bs)
			rows := make([][]byte, layers)
			var waits []func() error
			b.AfterLayer = func(piece model.LayerPiece, read model.LayerReader) error { // one rank: a piece is a layer
				rows[piece.Layer] = make([]byte, len(step.blocks)*piece.Bytes)
				wait, err := read(step.blocks, rows[piece.Layer])
				waits = append(waits, wait)
				return err
			}
			logits, err := m.Forward(b, kv)
			if err != nil {
				t.Fatal(err)
			}
			for _, wait := range waits {
				if err := wait(); err != nil {
					t.Fatal(err)
				}
			}
			if len(waits) != layers {
				t.Fatalf("%s: the hook ran for %d layers of %d", kvType, len(waits), layers)
			}
			b.AfterLayer = nil
			want, err := m.Forward(b, plain)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(logits, want) {
				t.Fatalf("%s: a step with the hook gives other logits", kvType)
			}
			whole := readBlocks(t, kv, step.blocks)
			for l := range layers {
				for i, blk := range step.blocks {
					if !bytes.Equal(rows[l][i*lb:][:lb], whole[i*kv.BlockBytes()+l*lb:][:lb]) {
						t.Fatalf("%s: layer %d of block %d: the hook's rows differ from the block's after the step", kvType, l, blk)
					}
				}
			}
		}
	}
}
