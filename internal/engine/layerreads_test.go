package engine

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/model"
)

// TestLayerReadsHandOver: a step's layer reads whose copies finish later (as a GPU's on
// its side stream) are handed to every report in layer order, each report its own blocks'
// part of the layer, all before finish returns; a read that fails or a copy that fails
// leaves its layer unreported and the step unharmed.
func TestLayerReadsHandOver(t *testing.T) {
	const layers, lb = 4, 3
	type call struct {
		first, layer int
		data         []byte
	}
	var calls []call // appended by the waiter goroutine only
	collect := func(id int) LayerKVFunc {
		return func(first, layer int, data []byte) {
			calls = append(calls, call{first: first + 100*id, layer: layer, data: bytes.Clone(data)})
		}
	}
	lr := &layerReads{}
	lr.reset()
	lr.bytes, lr.layers = lb, layers
	lr.reports = []layerReport{{fn: collect(0), first: 2, at: 0, n: 2}, {fn: collect(1), first: 0, at: 2, n: 1}}
	lr.blocks = []int32{7, 8, 3}
	for l := range layers {
		lr.pieces = append(lr.pieces, model.LayerPiece{Layer: l, Offset: l * lb, Bytes: lb})
	}
	release := make(chan struct{})
	read := func(layer int) func(blocks []int32, dst []byte) (func() error, error) {
		return func(blocks []int32, dst []byte) (func() error, error) {
			if layer == 1 {
				return nil, errors.New("read refused")
			}
			return func() error {
				<-release
				if layer == 3 {
					return errors.New("copy failed")
				}
				for i, b := range blocks {
					for j := range lb {
						dst[i*lb+j] = byte(10*layer + int(b) + j)
					}
				}
				return nil
			}, nil
		}
	}
	for l, p := range lr.pieces {
		if err := lr.afterLayer(p, read(l)); err != nil {
			t.Fatalf("layer %d: %v", l, err)
		}
	}
	if err := lr.afterLayer(model.LayerPiece{Layer: layers, Offset: layers * lb, Bytes: lb}, read(0)); err == nil {
		t.Fatal("a layer past the model's accepted")
	}
	done := make(chan struct{})
	go func() {
		lr.finish()
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("finish returned before the copies were done")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-done
	var got []string
	for _, c := range calls {
		got = append(got, fmt.Sprintf("%d/%d:%v", c.first, c.layer, c.data))
	}
	want := []string{
		"2/0:[7 8 9 8 9 10]", "100/0:[3 4 5]",
		"2/2:[27 28 29 28 29 30]", "100/2:[23 24 25]",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handed over %v, want %v", got, want)
	}
}

// TestLayerReadsPieces: on a model split by tensor (or pipeline), a block's layer parts are
// made of pieces of several ranks, their hooks called at once from the ranks' goroutines;
// each part is handed over once, when the last of its pieces is copied, holding the
// block's bytes of the part in the block I/O layout whatever piece they came from, and a
// part with a failed piece is not handed over. The pieces here are of the bytes of no
// part, so that some straddle two parts.
func TestLayerReadsPieces(t *testing.T) {
	const layers, lb = 3, 2 // a block of 6 bytes, three parts
	val := func(block int32, off int) byte { return byte(16*block) + byte(off) }
	for _, tc := range []struct {
		name   string
		pieces []model.LayerPiece
		bad    int // the piece whose copy fails (-1: none)
		want   []int
	}{
		{"two ranks of two pieces", []model.LayerPiece{
			{Layer: 0, Rank: 0, Offset: 0, Bytes: 1}, {Layer: 1, Rank: 0, Offset: 1, Bytes: 1},
			{Layer: 0, Rank: 1, Offset: 2, Bytes: 2}, {Layer: 1, Rank: 1, Offset: 4, Bytes: 2},
		}, -1, []int{0, 1, 2}},
		{"straddling pieces", []model.LayerPiece{
			{Layer: 0, Rank: 0, Offset: 0, Bytes: 3}, {Layer: 0, Rank: 1, Offset: 3, Bytes: 3},
		}, -1, []int{0, 1, 2}},
		{"a failed straddling piece", []model.LayerPiece{
			{Layer: 0, Rank: 0, Offset: 0, Bytes: 3}, {Layer: 0, Rank: 1, Offset: 3, Bytes: 3},
		}, 1, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[int]int{} // part -> times handed over
			lr := &layerReads{}
			lr.reset()
			lr.bytes, lr.layers, lr.pieces = lb, layers, tc.pieces
			lr.blocks = []int32{5, 2}
			lr.reports = []layerReport{{first: 4, at: 0, n: 2, fn: func(first, layer int, data []byte) {
				mu.Lock()
				defer mu.Unlock()
				got[layer]++
				if first != 4 || len(data) != 2*lb {
					t.Errorf("part %d: first %d, %d bytes", layer, first, len(data))
					return
				}
				for i, b := range lr.blocks {
					for j := range lb {
						if w := val(b, layer*lb+j); data[i*lb+j] != w {
							t.Errorf("part %d, block %d, byte %d: %d, want %d", layer, b, j, data[i*lb+j], w)
						}
					}
				}
			}}}
			var wg sync.WaitGroup
			for r := range 2 { // the ranks, each its pieces in order
				wg.Go(func() {
					for k, p := range tc.pieces {
						if p.Rank != r {
							continue
						}
						err := lr.afterLayer(p, func(blocks []int32, dst []byte) (func() error, error) {
							if k == tc.bad {
								return func() error { return errors.New("copy failed") }, nil
							}
							for i, b := range blocks {
								for j := range p.Bytes {
									dst[i*p.Bytes+j] = val(b, p.Offset+j)
								}
							}
							return func() error { return nil }, nil
						})
						if err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			lr.finish()
			var parts []int
			for l := range layers {
				if got[l] > 1 {
					t.Errorf("part %d handed over %d times", l, got[l])
				}
				if got[l] > 0 {
					parts = append(parts, l)
				}
			}
			if fmt.Sprint(parts) != fmt.Sprint(tc.want) {
				t.Fatalf("parts handed over %v, want %v", parts, tc.want)
			}
		})
	}
}
