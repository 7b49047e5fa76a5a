package cpubackend

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
)

// ReadBlocks copies the keys and values of blocks, every layer, into dst in the host layout
// (backend.KVSpec).
func (b *Backend) ReadBlocks(kv backend.KVCache, blocks []int32, dst []byte) error {
	return transferBlocks("read blocks", kv, blocks, dst, false)
}

// WriteBlocks overwrites the keys and values of blocks, every layer, from src in the host
// layout.
func (b *Backend) WriteBlocks(kv backend.KVCache, blocks []int32, src []byte) error {
	return transferBlocks("write blocks", kv, blocks, src, true)
}

// transferBlocks moves blocks between the cache and host, layer by layer within each
// block, keys then values: into the cache when write is set, else out of it.
func transferBlocks(op string, kv backend.KVCache, blocks []int32, host []byte, write bool) error {
	c, _, err := cache(op, kv, -1)
	if err != nil {
		return err
	}
	if err := backend.CheckBlocks(c.spec, blocks, len(host)); err != nil {
		return fmt.Errorf("cpu %s: %w", op, err)
	}
	off := 0
	for _, blk := range blocks {
		for l, layer := range c.layers {
			per, all := layer.BlockBytes(), layer.HostBytes()
			k, v := host[off:off+per], host[off+per:off+all]
			if write {
				err = layer.WriteBlock(int(blk), k, v)
			} else {
				err = layer.ReadBlock(int(blk), k, v)
			}
			if err != nil {
				return fmt.Errorf("cpu %s: layer %d: %w", op, l, err)
			}
			off += all
		}
	}
	return nil
}

// ReadLayerBlocks copies layer's keys and values of blocks into dst in the host layout of
// one layer (backend.LayerKVReader) at once: the CPU runs every op as it is called, so the
// layer's keys and values are in the cache once its ops returned, and the wait returned
// has nothing to wait for. It takes no lock: it is called inside Run.
func (b *Backend) ReadLayerBlocks(kv backend.KVCache, layer int, blocks []int32, dst []byte) (func() error, error) {
	if err := readLayerBlocks(kv, layer, blocks, dst); err != nil {
		return nil, err
	}
	return func() error { return nil }, nil
}

// readLayerBlocks copies layer's keys and values of blocks into dst.
func readLayerBlocks(kv backend.KVCache, layer int, blocks []int32, dst []byte) error {
	if layer < 0 {
		return fmt.Errorf("cpu read layer blocks: layer %d", layer)
	}
	c, lc, err := cache("read layer blocks", kv, layer)
	if err != nil {
		return err
	}
	per, all := lc.BlockBytes(), lc.HostBytes()
	if err := backend.CheckBlocks(c.spec, blocks, len(blocks)*c.spec.BlockBytes()); err != nil {
		return fmt.Errorf("cpu read layer blocks: %w", err)
	}
	if len(dst) != all*len(blocks) {
		return fmt.Errorf("cpu read layer blocks: a buffer of %d bytes for %d blocks of %d in one layer", len(dst), len(blocks), all)
	}
	for i, blk := range blocks {
		if err := lc.ReadBlock(int(blk), dst[i*all:][:per], dst[i*all+per:][:all-per]); err != nil {
			return fmt.Errorf("cpu read layer blocks: layer %d: %w", layer, err)
		}
	}
	return nil
}
