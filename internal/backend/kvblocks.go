package backend

import "fmt"

// CheckBlocks checks the arguments of ReadBlocks or WriteBlocks on a cache of spec: every
// block id in [0, NumBlocks), and a host buffer of hostBytes = len(blocks) x BlockBytes.
func CheckBlocks(spec KVSpec, blocks []int32, hostBytes int) error {
	per := spec.BlockBytes()
	if per <= 0 {
		return fmt.Errorf("kv blocks: a cache of %s elements has no host layout", spec.DType)
	}
	for i, b := range blocks {
		if b < 0 || int(b) >= spec.NumBlocks {
			return fmt.Errorf("kv blocks: entry %d: block %d outside the cache's %d blocks", i, b, spec.NumBlocks)
		}
	}
	if hostBytes != len(blocks)*per {
		return fmt.Errorf("kv blocks: a host buffer of %d bytes for %d blocks of %d", hostBytes, len(blocks), per)
	}
	return nil
}
