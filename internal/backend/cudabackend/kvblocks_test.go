package cudabackend

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
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
// device's per-layer K and V buffers, and reorderBlocks give the host layout (block after
// block, layer after layer, keys then values, each a block's contiguous bytes) on the way
// out; written back through the same path into other blocks, the bytes land there and
// nowhere else.
func TestBlockStaging(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const layers, numBlocks, per, elem = 3, 12, 10, 2 // per: elements of a block's keys
	half := per * elem
	dev := make([][2][]byte, layers) // [layer][K, V]
	for l := range dev {
		for kv := range 2 {
			dev[l][kv] = make([]byte, numBlocks*half)
			for i := range dev[l][kv] {
				dev[l][kv][i] = byte(r.Uint32())
			}
		}
	}
	blocks := []int32{7, 8, 2, 3, 4, 11, 0}
	// The host layout, built from the definition.
	var want []byte
	for _, b := range blocks {
		for l := range layers {
			for kv := range 2 {
				want = append(want, dev[l][kv][int(b)*half:][:half]...)
			}
		}
	}
	runs := blockRuns(blocks)
	staging := make([]byte, len(want))
	play := func(toDevice bool) {
		for _, cp := range blockCopies(runs, layers, per, elem) {
			kv := 0
			if cp.v {
				kv = 1
			}
			d := dev[cp.layer][kv][cp.from*elem : cp.to*elem]
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
	reorderBlocks(host, staging, runs, layers, half, false)
	if !bytes.Equal(host, want) {
		t.Fatal("read bytes are not in the host layout")
	}
	// Write them to other blocks; the rest of the cache keeps its bytes.
	before := make([][2][]byte, layers)
	for l := range dev {
		before[l] = [2][]byte{slices.Clone(dev[l][0]), slices.Clone(dev[l][1])}
	}
	others := []int32{1, 5, 6, 9, 10, 3, 2}
	runs = blockRuns(others)
	clear(staging)
	reorderBlocks(host, staging, runs, layers, half, true)
	play(true)
	for i, b := range others {
		for l := range layers {
			for kv := range 2 {
				got := dev[l][kv][int(b)*half:][:half]
				if w := want[((i*layers+l)*2+kv)*half:][:half]; !bytes.Equal(got, w) {
					t.Fatalf("block %d layer %d part %d: written bytes differ", b, l, kv)
				}
			}
		}
	}
	for l := range layers {
		for kv := range 2 {
			for b := range numBlocks {
				if slices.Contains(others, int32(b)) {
					continue
				}
				if !bytes.Equal(dev[l][kv][b*half:][:half], before[l][kv][b*half:][:half]) {
					t.Fatalf("block %d layer %d part %d changed though not written", b, l, kv)
				}
			}
		}
	}
}

// TestLayerStaging: ReadLayerBlocks's copies of one layer (blockCopies and reorderBlocks of
// a single layer, played on a host stand-in for the layer's K and V buffers) give the host
// layout of one layer: block after block as asked, its keys then its values.
func TestLayerStaging(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const numBlocks, per, elem = 9, 6, 2
	half := per * elem
	var dev [2][]byte // K, V of the layer
	for kv := range dev {
		dev[kv] = make([]byte, numBlocks*half)
		for i := range dev[kv] {
			dev[kv][i] = byte(r.Uint32())
		}
	}
	blocks := []int32{4, 5, 6, 0, 8, 1, 2}
	var want []byte
	for _, b := range blocks {
		want = append(want, dev[0][int(b)*half:][:half]...)
		want = append(want, dev[1][int(b)*half:][:half]...)
	}
	runs := blockRuns(blocks)
	staging := make([]byte, len(want))
	cps := blockCopies(runs, 1, per, elem)
	if len(cps) != 2*len(runs) {
		t.Fatalf("%d copies for %d runs of one layer", len(cps), len(runs))
	}
	for _, cp := range cps {
		kv := 0
		if cp.v {
			kv = 1
		}
		copy(staging[cp.off:], dev[kv][cp.from*elem:cp.to*elem])
	}
	got := make([]byte, len(want))
	reorderBlocks(got, staging, runs, 1, half, false)
	if !bytes.Equal(got, want) {
		t.Fatal("a layer's staged bytes are not in the host layout of one layer")
	}
}
