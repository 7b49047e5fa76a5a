package engine

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
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
	lr := &layerReads{bytes: lb, layers: layers,
		reports: []layerReport{{fn: collect(0), first: 2, at: 0, n: 2}, {fn: collect(1), first: 0, at: 2, n: 1}},
		blocks:  []int32{7, 8, 3}}
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
	for l := range layers {
		if err := lr.afterLayer(l, read(l)); err != nil {
			t.Fatalf("layer %d: %v", l, err)
		}
	}
	if err := lr.afterLayer(layers, read(0)); err == nil {
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
