package kvasir

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/engine"
	"github.com/kvasir-llm/kvasir/internal/kvpool"
)

// KVPoolStats are the counters of the shared KV pool and the host offload tier
// (Options.KVPool, Options.KVOffloadMemory): see kvpool.Stats.
type KVPoolStats = kvpool.Stats

// kvNamespace names the model and the layout of its KV blocks in a shared pool: a digest
// of the tensors (names, types, shapes and a sample of their bytes: the first and last 4
// KiB), the configuration, and what shapes a block's bytes (block size, KV element type,
// split). Instances agree on it exactly when they can exchange blocks.
func kvNamespace(l *Loaded, blockSize, blockBytes int) string {
	h := sha256.New()
	fm := l.fm
	fmt.Fprintf(h, "%s\n%+v\n", fm.Format, fm.Config)
	for _, t := range fm.Tensors {
		fmt.Fprintf(h, "%s %v %v %d\n", t.Name, t.Type, t.Shape, len(t.Data))
		const sample = 4 << 10
		if len(t.Data) <= 2*sample {
			h.Write(t.Data)
		} else {
			h.Write(t.Data[:sample])
			h.Write(t.Data[len(t.Data)-sample:])
		}
	}
	par := l.m.Parallel()
	var layout [5 * 8]byte
	elem := l.m.KVRowBytes() / l.fm.Config.HeadDim // bytes per element, as it was hashed before quantized caches
	for i, v := range []int{blockSize, blockBytes, elem, par.Tensor, par.Pipeline} {
		binary.LittleEndian.PutUint64(layout[8*i:], uint64(v))
	}
	h.Write(layout[:])
	if dt := l.m.KVCacheDType(); dt.KVQuantized() {
		fmt.Fprintf(h, "kv %s\n", dt) // int8 and fp8 blocks are of one size
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// kvStore returns the engine's NewKVStore for opt's pool and host tier (nil for neither),
// which leaves the pool it makes in *made for the Engine to report and close.
func kvStore(l *Loaded, opt Options, blockSize int, made **kvpool.Pool) func(int) (engine.KVStore, error) {
	if opt.KVPool == "" && opt.KVOffloadMemory <= 0 {
		return nil
	}
	return func(blockBytes int) (engine.KVStore, error) {
		p, err := kvpool.New(kvpool.Config{URL: opt.KVPool, Namespace: kvNamespace(l, blockSize, blockBytes),
			BlockBytes: blockBytes, OffloadBytes: opt.KVOffloadMemory, Log: opt.KVPoolLog})
		if err != nil {
			return nil, err
		}
		*made = p
		return p, nil
	}
}

// CheckKVPoolURL checks a KV pool's address (Options.KVPool) without connecting.
func CheckKVPoolURL(url string) error { return kvpool.CheckURL(url) }

// FlushKVPool waits until the engine is idle and the shared pool has written every block
// the engine computed so far, or ctx ends: after it another instance finds them (tests and
// benchmarks; serving never needs to wait).
func (e *Engine) FlushKVPool(ctx context.Context) error {
	if e.pool == nil {
		return nil
	}
	if err := e.e.SyncStore(ctx); err != nil {
		return err
	}
	return e.pool.Flush(ctx)
}

// KVPoolStats returns the counters of the engine's shared KV pool and host tier, and false
// when it has neither.
func (e *Engine) KVPoolStats() (KVPoolStats, bool) {
	if e.pool == nil {
		return KVPoolStats{}, false
	}
	return e.pool.Stats(), true
}
