package cudabackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/kvquant"
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
// the device (of a quantized cache's codes and of their scales), so a chunk takes one
// asynchronous copy per run, layer and segment (blockSegs), all queued before one wait;
// the host side reorders between the staging buffer (device order) and the host layout.
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
	segs := blockSegs(s)
	for start := 0; start < len(blocks); start += chunk {
		part := blocks[start:min(start+chunk, len(blocks))]
		h := host[start*blockBytes : (start+len(part))*blockBytes]
		runs := blockRuns(part)
		if write {
			reorderBlocks(h, staging, runs, s.Layers, segs, true)
		}
		for _, cp := range blockCopies(runs, s.Layers, segs) {
			dev, err := segBuffer(c.layers[cp.layer], segs[cp.seg].part).Slice(cp.from, cp.to)
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
			reorderBlocks(h, staging, runs, s.Layers, segs, false)
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

// The parts of a cache layer a block segment lives in.
const (
	partK = iota
	partV
	partKScales
	partVScales
)

// blockSeg is one segment of a layer's share of a block in the host layout: elems
// elements of size bytes in the layer's buffer part (partK ...). A layer's keys then its
// values are the segments of blockSegs in order.
type blockSeg struct {
	part, elems, size int
}

// bytes returns the segment's bytes in one block.
func (s blockSeg) bytes() int { return s.elems * s.size }

// blockSegs returns the segments of one layer's share of a block of a cache of spec, in
// the host layout's order: the keys, then the values, each its elements (F32, F16, BF16),
// or a quantized cache's codes and then their scales; the keys alone when the values are
// the keys.
func blockSegs(spec backend.KVSpec) []blockSeg {
	per := spec.BlockSize * spec.KVHeads * spec.HeadDim
	var segs []blockSeg
	if _, ok := kvCodes(spec.DType); ok {
		g := per / kvquant.Group(spec.HeadDim)
		segs = []blockSeg{{partK, per, 1}, {partKScales, g, 4}, {partV, per, 1}, {partVScales, g, 4}}
	} else {
		eb := kvquant.RowBytes(spec.DType, spec.HeadDim) / spec.HeadDim
		segs = []blockSeg{{partK, per, eb}, {partV, per, eb}}
	}
	if spec.ValuesAreKeys {
		return segs[:len(segs)/2]
	}
	return segs
}

// segBuffer returns the buffer of layer l that holds part.
func segBuffer(l *cuda.KVCacheLayer, part int) cuda.Buffer {
	return [...]cuda.Buffer{l.K, l.V, l.KS, l.VS}[part]
}

// blockCopy is one contiguous copy between a cache buffer and the staging buffer: segment
// seg of layer, elements [from, to) of its buffer, at byte off of the staging buffer.
type blockCopy struct {
	layer, seg int
	from, to   int
	off        int
}

// blockCopies lists the copies of runs over layers of blocks of segments segs: run after
// run in the staging buffer, within a run layer after layer, segment after segment, each
// the run's blocks in device order.
func blockCopies(runs []blockRun, layers int, segs []blockSeg) []blockCopy {
	var cps []blockCopy
	off := 0
	for _, r := range runs {
		for l := range layers {
			for i, sg := range segs {
				cps = append(cps, blockCopy{layer: l, seg: i, from: r.first * sg.elems, to: (r.first + r.n) * sg.elems, off: off})
				off += r.n * sg.bytes()
			}
		}
	}
	return cps
}

// reorderBlocks copies between the host layout (host: block after block, layer after
// layer, each the segments segs in order) and the staging buffer laid out as blockCopies
// lays it: into staging when toStaging is set, else out of it.
func reorderBlocks(host, staging []byte, runs []blockRun, layers int, segs []blockSeg, toStaging bool) {
	layerBytes := 0
	for _, sg := range segs {
		layerBytes += sg.bytes()
	}
	blockBytes := layers * layerBytes
	base := 0
	for _, r := range runs {
		for l := range layers {
			at := l * layerBytes // the segment's offset in a host block
			for _, sg := range segs {
				n := sg.bytes()
				for j := range r.n {
					s := staging[base+j*n:][:n]
					h := host[(r.at+j)*blockBytes+at:][:n]
					if toStaging {
						copy(s, h)
					} else {
						copy(h, s)
					}
				}
				base += r.n * n
				at += n
			}
		}
	}
}

// ReadLayerBlocks queues a copy of layer's keys and values of blocks into pinned staging on
// the device's side stream, after the layer's ops queued so far on the compute stream,
// which goes on with the next layers without waiting for it (backend.LayerKVReader); the
// wait returned, called from any goroutine, waits for the copy's event and copies the
// staging into dst in the host layout. As in ReadBlocks, a run of consecutive block ids is
// one contiguous range of each of the layer's segments (its keys and its values, or a
// quantized cache's codes and scales of each), so a run takes one copy a segment. A step's
// reads go one after another into the staging, which layer 0's read (a
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
	lb := s.BlockBytes() / s.Layers // one block's keys and values in one layer
	n := lb * len(blocks)
	if len(dst) != n {
		return nil, fmt.Errorf("cuda read layer blocks: a buffer of %d bytes for %d blocks of %d in one layer", len(dst), len(blocks), lb)
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
	segs := blockSegs(s)
	runs := blockRuns(blocks)
	cps := blockCopies(runs, 1, segs) // layer 0 of one: the copies of lc
	offs, bufs := make([]int, len(cps)), make([]cuda.Buffer, len(cps))
	for i, cp := range cps {
		dev, err := segBuffer(lc, segs[cp.seg].part).Slice(cp.from, cp.to)
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
		reorderBlocks(dst, host.Bytes()[at:][:n], runs, 1, segs, false)
		return nil
	}, nil
}
