package model

import "fmt"

// BlockBytes returns the bytes one block takes in the host layout of ReadBlocks: the
// ranks' parts of it, each backend.KVSpec.BlockBytes of its rank's cache.
func (kv *KVCache) BlockBytes() int {
	n := 0
	for _, p := range kv.parts {
		n += p.Spec().BlockBytes()
	}
	return n
}

// LayerBlockBytes returns the bytes of one layer's part of a block in the host layout of
// ReadBlocks (BlockBytes over the model's layers): on a model not split by tensor, exactly
// layer l's keys and values at offset l x LayerBlockBytes of the block, a LayerReader's
// bytes a block; on one split by tensor, a run of the block that the layer pieces of one
// or more ranks fill (LayerPieces).
func (kv *KVCache) LayerBlockBytes() int { return kv.BlockBytes() / kv.m.cfg.Layers }

// LayerPieces returns where each rank's part of each layer lies in a block's host layout
// (ReadBlocks), rank after rank, each rank's layers in order: the pieces an AfterLayer hook
// is called with. They tile the block. On a model not split by tensor, piece l is layer l
// at offset l x LayerBlockBytes; on one split by tensor, a layer has one piece on each rank
// of its stage (the rank's KV heads), at that rank's place in the block.
func (kv *KVCache) LayerPieces() []LayerPiece {
	var out []LayerPiece
	off := 0
	for r, s := range kv.m.ranks {
		spec := kv.parts[r].Spec()
		per := spec.BlockBytes() / spec.Layers
		for l := range spec.Layers {
			out = append(out, LayerPiece{Layer: s.layer0 + l, Rank: r, Offset: off + l*per, Bytes: per})
		}
		off += spec.BlockBytes()
	}
	return out
}

// ReadBlocks copies the keys and values of blocks, every layer of every rank, into dst:
// block after block in the order given, BlockBytes each; within a block, the ranks' parts
// in rank order, each in the backends' host layout (backend.KVSpec). The bytes depend on
// the contents, the model's split and the cache's geometry and element type, not on the
// backend, so blocks read from one cache may be written into another (another instance's
// included) of the same model, split and element type. len(dst) must be len(blocks) x
// BlockBytes.
func (kv *KVCache) ReadBlocks(blocks []int32, dst []byte) error {
	return kv.transfer("read blocks", blocks, dst, false)
}

// WriteBlocks overwrites the keys and values of blocks, every layer of every rank, from
// src laid out as ReadBlocks writes it (a block named twice takes the later).
func (kv *KVCache) WriteBlocks(blocks []int32, src []byte) error {
	return kv.transfer("write blocks", blocks, src, true)
}

// transfer moves blocks between every rank's part and host: into the cache when write is
// set, else out of it. A split cache goes through one buffer per rank, interleaved.
func (kv *KVCache) transfer(op string, blocks []int32, host []byte, write bool) error {
	total := kv.BlockBytes()
	for i, b := range blocks {
		if b < 0 || int(b) >= kv.NumBlocks {
			return fmt.Errorf("kv cache: %s: entry %d: block %d outside the cache's %d blocks", op, i, b, kv.NumBlocks)
		}
	}
	if len(host) != len(blocks)*total {
		return fmt.Errorf("kv cache: %s: a buffer of %d bytes for %d blocks of %d", op, len(host), len(blocks), total)
	}
	if len(blocks) == 0 {
		return nil
	}
	off := 0
	for r, s := range kv.m.ranks {
		part := kv.parts[r]
		per := part.Spec().BlockBytes()
		buf := host
		if len(kv.parts) > 1 {
			buf = make([]byte, len(blocks)*per)
			if write {
				interleave(buf, host, per, total, off, false)
			}
		}
		err := s.be.Run(func() error {
			if write {
				return s.be.WriteBlocks(part, blocks, buf)
			}
			return s.be.ReadBlocks(part, blocks, buf)
		})
		if err != nil {
			return fmt.Errorf("kv cache: %s: rank %d: %w", op, r, err)
		}
		if !write && len(kv.parts) > 1 {
			interleave(buf, host, per, total, off, true)
		}
		off += per
	}
	return nil
}

// interleave copies between one rank's blocks (part: per bytes each) and their place in
// the host layout (host: total bytes a block, the rank's per at offset off): into host
// when toHost is set, else out of it.
func interleave(part, host []byte, per, total, off int, toHost bool) {
	for i := range len(part) / per {
		p, h := part[i*per:][:per], host[i*total+off:][:per]
		if toHost {
			copy(h, p)
		} else {
			copy(p, h)
		}
	}
}
