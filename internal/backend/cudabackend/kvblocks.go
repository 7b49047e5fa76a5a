package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// blockStagingBytes bounds the pinned staging buffer ReadBlocks and WriteBlocks copy
// through: a larger transfer goes in chunks of whole blocks.
const blockStagingBytes = 64 << 20

// ReadBlocks copies the keys and values of blocks, every layer, into dst in the host
// layout (backend.KVSpec), after the work queued so far.
func (b *Backend) ReadBlocks(kv backend.KVCache, blocks []int32, dst []byte) error {
	return b.transferBlocks("read blocks", kv, blocks, dst, false)
}

// WriteBlocks overwrites the keys and values of blocks, every layer, from src in the host
// layout; it returns once the copies are done.
func (b *Backend) WriteBlocks(kv backend.KVCache, blocks []int32, src []byte) error {
	return b.transferBlocks("write blocks", kv, blocks, src, true)
}

// transferBlocks moves blocks between the cache and host through pinned memory, a chunk of
// blocks at a time: into the cache when write is set, else out of it. Each run of
// consecutive block ids is one contiguous range of every layer's keys and of its values on
// the device, so a chunk takes one asynchronous copy per run, layer and K or V, all queued
// before one wait; the host side reorders between the staging buffer (device order) and
// the host layout.
func (b *Backend) transferBlocks(op string, kv backend.KVCache, blocks []int32, host []byte, write bool) error {
	c, _, err := kvOf(op, kv, -1)
	if err != nil {
		return err
	}
	s := c.spec
	if err := backend.CheckBlocks(s, blocks, len(host)); err != nil {
		return fmt.Errorf("cuda %s: %w", op, err)
	}
	if len(blocks) == 0 {
		return nil
	}
	blockBytes := s.BlockBytes()
	chunk := max(1, blockStagingBytes/blockBytes)
	if err := b.growBlockStaging(min(len(blocks), chunk) * blockBytes); err != nil {
		return fmt.Errorf("cuda %s: %w", op, err)
	}
	staging := b.blockHost.Bytes()
	per := s.BlockSize * s.KVHeads * s.HeadDim // elements of one block's keys in one layer
	for start := 0; start < len(blocks); start += chunk {
		part := blocks[start:min(start+chunk, len(blocks))]
		h := host[start*blockBytes : (start+len(part))*blockBytes]
		runs := blockRuns(part)
		if write {
			reorderBlocks(h, staging, runs, s.Layers, blockBytes/(2*s.Layers), true)
		}
		for _, cp := range blockCopies(runs, s.Layers, per, blockBytes/(2*s.Layers*per)) {
			buf := c.layers[cp.layer].K
			if cp.v {
				buf = c.layers[cp.layer].V
			}
			dev, err := buf.Slice(cp.from, cp.to)
			if err != nil {
				return fmt.Errorf("cuda %s: %w", op, err)
			}
			if write {
				err = b.dev.UploadAsync(dev, b.blockHost, cp.off)
			} else {
				err = b.dev.DownloadAsync(b.blockHost, cp.off, dev)
			}
			if err != nil {
				return fmt.Errorf("cuda %s: %w", op, err)
			}
		}
		if err := b.dev.Sync(); err != nil {
			return fmt.Errorf("cuda %s: %w", op, err)
		}
		if !write {
			reorderBlocks(h, staging, runs, s.Layers, blockBytes/(2*s.Layers), false)
		}
	}
	return nil
}

// growBlockStaging makes the pinned staging buffer hold at least n bytes (inside Run).
func (b *Backend) growBlockStaging(n int) error {
	if b.blockHost != nil && len(b.blockHost.Bytes()) >= n {
		return nil
	}
	// A queued copy may still read the old buffer.
	if err := firstErr(b.dev.Sync(), b.dev.FreeHost(b.blockHost)); err != nil {
		return err
	}
	b.blockHost = nil
	h, err := b.dev.AllocHost(n)
	if err != nil {
		return err
	}
	b.blockHost = h
	return nil
}

// blockRun is a run of consecutive block ids in a transfer: blocks[at+j] = first+j for
// j < n.
type blockRun struct{ first, at, n int }

// blockRuns cuts blocks into runs of consecutive ids, in order.
func blockRuns(blocks []int32) []blockRun {
	var runs []blockRun
	for i, blk := range blocks {
		if k := len(runs) - 1; k >= 0 && runs[k].first+runs[k].n == int(blk) {
			runs[k].n++
			continue
		}
		runs = append(runs, blockRun{first: int(blk), at: i, n: 1})
	}
	return runs
}

// blockCopy is one contiguous copy between a cache buffer and the staging buffer: the
// keys (or the values, v) of layer, elements [from, to), at byte off of the staging buffer.
type blockCopy struct {
	layer    int
	v        bool
	from, to int
	off      int
}

// blockCopies lists the copies of runs over layers of blocks of per elements of
// elemBytes bytes, keys and values: run after run in the staging buffer, within a run
// layer after layer, keys then values, each the run's blocks in device order.
func blockCopies(runs []blockRun, layers, per, elemBytes int) []blockCopy {
	var cps []blockCopy
	off := 0
	for _, r := range runs {
		for l := range layers {
			for _, v := range []bool{false, true} {
				cps = append(cps, blockCopy{layer: l, v: v, from: r.first * per, to: (r.first + r.n) * per, off: off})
				off += r.n * per * elemBytes
			}
		}
	}
	return cps
}

// reorderBlocks copies between the host layout (host: block after block, layer after
// layer, keys then values of half bytes each) and the staging buffer laid out as
// blockCopies lays it: into staging when toStaging is set, else out of it.
func reorderBlocks(host, staging []byte, runs []blockRun, layers, half int, toStaging bool) {
	blockBytes := 2 * layers * half
	base := 0
	for _, r := range runs {
		for part := range 2 * layers { // layer part/2, keys (even) or values (odd)
			for j := range r.n {
				s := staging[base+(part*r.n+j)*half:][:half]
				h := host[(r.at+j)*blockBytes+part*half:][:half]
				if toStaging {
					copy(s, h)
				} else {
					copy(h, s)
				}
			}
		}
		base += r.n * blockBytes
	}
}

// ReadLayerBlocks queues a copy of layer's keys and values of blocks into pinned staging on
// the device's side stream, after the layer's ops queued so far on the compute stream,
// which goes on with the next layers without waiting for it (backend.LayerKVReader); the
// wait returned, called from any goroutine, waits for the copy's event and copies the
// staging into dst in the host layout. As in ReadBlocks, a run of consecutive block ids is
// one contiguous range of the layer's keys and one of its values, so a run takes two
// copies. A step's reads go one after another into the staging, which layer 0's read (a
// step's first) grows to room for every layer's read of as many blocks, after the previous
// step's waits have all returned.
func (b *Backend) ReadLayerBlocks(kv backend.KVCache, layer int, blocks []int32, dst []byte) (func() error, error) {
	if layer < 0 {
		return nil, fmt.Errorf("cuda read layer blocks: layer %d", layer)
	}
	c, lc, err := kvOf("read layer blocks", kv, layer)
	if err != nil {
		return nil, err
	}
	s := c.spec
	if err := backend.CheckBlocks(s, blocks, len(blocks)*s.BlockBytes()); err != nil {
		return nil, fmt.Errorf("cuda read layer blocks: %w", err)
	}
	half := s.BlockBytes() / (2 * s.Layers) // one block's keys (or values) in one layer
	n := 2 * half * len(blocks)
	if len(dst) != n {
		return nil, fmt.Errorf("cuda read layer blocks: a buffer of %d bytes for %d blocks of %d in one layer", len(dst), len(blocks), 2*half)
	}
	if layer == 0 {
		b.layerAt = 0
		if need := s.Layers * n; b.layerHost == nil || len(b.layerHost.Bytes()) < need {
			// The previous step's copies are done (their waits returned); the graphs do
			// not use this buffer.
			if err := b.dev.FreeHost(b.layerHost); err != nil {
				return nil, fmt.Errorf("cuda read layer blocks: %w", err)
			}
			b.layerHost = nil
			if b.layerHost, err = b.dev.AllocHost(need); err != nil {
				return nil, fmt.Errorf("cuda read layer blocks: %w", err)
			}
		}
	}
	at := b.layerAt
	if b.layerHost == nil || at+n > len(b.layerHost.Bytes()) {
		return nil, fmt.Errorf("cuda read layer blocks: layer %d's read past the step's staging (layer 0 read fewer blocks)", layer)
	}
	per := s.BlockSize * s.KVHeads * s.HeadDim // elements of one block's keys in one layer
	if half%per != 0 {
		return nil, fmt.Errorf("cuda read layer blocks: %d bytes of a block's keys are not %d whole elements", half, per)
	}
	runs := blockRuns(blocks)
	cps := blockCopies(runs, 1, per, half/per)
	offs, bufs := make([]int, len(cps)), make([]cuda.Buffer, len(cps))
	for i, cp := range cps {
		buf := lc.K
		if cp.v {
			buf = lc.V
		}
		dev, err := buf.Slice(cp.from, cp.to)
		if err != nil {
			return nil, fmt.Errorf("cuda read layer blocks: %w", err)
		}
		offs[i], bufs[i] = at+cp.off, dev
	}
	ev, err := b.dev.SideDownload(b.layerHost, offs, bufs)
	if err != nil {
		return nil, fmt.Errorf("cuda read layer blocks: %w", err)
	}
	b.layerAt += n
	host := b.layerHost
	return func() error {
		if err := b.dev.WaitEvent(ev); err != nil {
			return fmt.Errorf("cuda read layer blocks: layer %d: %w", layer, err)
		}
		reorderBlocks(dst, host.Bytes()[at:][:n], runs, 1, half, false)
		return nil
	}, nil
}
