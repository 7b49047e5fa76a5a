package cudabackend

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestBlockRuns: block ids are cut into runs of consecutive ids, in order.
func TestBlockRuns(t *testing.T) {
	got := blockRuns([]int32{4, 5, 6, 2, 9, 10, 10, 3})
	want := []blockRun{{4, 0, 3}, {2, 3, 1}, {9, 4, 2}, {10, 6, 1}, {3, 7, 1}}
	if !slices.Equal(got, want) {
		t.Errorf("runs %v, want %v", got, want)
	}
	if got := blockRuns(nil); len(got) != 0 {
		t.Errorf("runs of nothing: %v", got)
	}
}

// TestBlockStaging: the copies blockCopies lists, played on a host stand-in for the
// device's per-layer buffers, and reorderBlocks give the host layout (block after block,
// layer after layer, each the layer's segments: keys then values, a quantized cache's codes
// then scales of each) on the way out; written back through the same path into other
// blocks, the bytes land there and nowhere else. blockSegs gives backend.KVSpec's block
// size for every cache type.
func TestBlockStaging(t *testing.T) {
	const layers, numBlocks = 3, 12
	for _, dt := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2} {
		spec := backend.KVSpec{Layers: layers, NumBlocks: numBlocks, BlockSize: 2, KVHeads: 1, HeadDim: 64, DType: dt}
		segs := blockSegs(spec)
		sum := 0
		for _, sg := range segs {
			sum += sg.bytes()
		}
		if sum*layers != spec.BlockBytes() {
			t.Errorf("%s: segments of %d bytes a layer, blocks of %d over %d layers", dt, sum, spec.BlockBytes(), layers)
		}
		testBlockStaging(t, dt.String(), segs, layers, numBlocks)
	}
}

func testBlockStaging(t *testing.T, name string, segs []blockSeg, layers, numBlocks int) {
	r := rand.New(rand.NewPCG(1, 2))
	dev := make([][][]byte, layers) // [layer][segment]
	for l := range dev {
		dev[l] = make([][]byte, len(segs))
		for i, sg := range segs {
			dev[l][i] = make([]byte, numBlocks*sg.bytes())
			for j := range dev[l][i] {
				dev[l][i][j] = byte(r.Uint32())
			}
		}
	}
	blockOf := func(l, i, b int) []byte { n := segs[i].bytes(); return dev[l][i][b*n:][:n] }
	blocks := []int32{7, 8, 2, 3, 4, 11, 0}
	// The host layout, built from the definition.
	var want []byte
	for _, b := range blocks {
		for l := range layers {
			for i := range segs {
				want = append(want, blockOf(l, i, int(b))...)
			}
		}
	}
	runs := blockRuns(blocks)
	staging := make([]byte, len(want))
	play := func(toDevice bool) {
		for _, cp := range blockCopies(runs, layers, segs) {
			sz := segs[cp.seg].size
			d := dev[cp.layer][cp.seg][cp.from*sz : cp.to*sz]
			s := staging[cp.off : cp.off+len(d)]
			if toDevice {
				copy(d, s)
			} else {
				copy(s, d)
			}
		}
	}
	play(false)
	host := make([]byte, len(want))
	reorderBlocks(host, staging, runs, layers, segs, false)
	if !bytes.Equal(host, want) {
		t.Fatalf("%s: read bytes are not in the host layout", name)
	}
	// Write them to other blocks; the rest of the cache keeps its bytes.
	before := make([][][]byte, layers)
	for l := range dev {
		for i := range segs {
			before[l] = append(before[l], slices.Clone(dev[l][i]))
		}
	}
	others := []int32{1, 5, 6, 9, 10, 3, 2}
	runs = blockRuns(others)
	clear(staging)
	reorderBlocks(host, staging, runs, layers, segs, true)
	play(true)
	off := 0
	for _, b := range others {
		for l := range layers {
			for i, sg := range segs {
				if !bytes.Equal(blockOf(l, i, int(b)), want[off:off+sg.bytes()]) {
					t.Fatalf("%s: block %d layer %d segment %d: written bytes differ", name, b, l, i)
				}
				off += sg.bytes()
			}
		}
	}
	for l := range layers {
		for i, sg := range segs {
			n := sg.bytes()
			for b := range numBlocks {
				if slices.Contains(others, int32(b)) {
					continue
				}
				if !bytes.Equal(dev[l][i][b*n:][:n], before[l][i][b*n:][:n]) {
					t.Fatalf("%s: block %d layer %d segment %d changed though not written", name, b, l, i)
				}
			}
		}
	}
}

// TestLayerStaging: ReadLayerBlocks's copies of one layer (blockCopies and reorderBlocks
// over a single layer, its copies naming layer 0 of one) give the host layout of one
// layer, block after block as asked, for every cache type.
func TestLayerStaging(t *testing.T) {
	for _, dt := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2} {
		spec := backend.KVSpec{Layers: 5, NumBlocks: 12, BlockSize: 2, KVHeads: 1, HeadDim: 64, DType: dt}
		testBlockStaging(t, dt.String()+", one layer", blockSegs(spec), 1, spec.NumBlocks)
	}
}
