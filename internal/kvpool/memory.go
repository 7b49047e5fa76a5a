package kvpool

import (
	"container/list"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// memoryTier is the host-memory tier: blocks the engine's cache evicted, least recently
// used first out, within a byte budget. It is safe for concurrent use.
type memoryTier struct {
	capacity int64

	mu    sync.Mutex
	used  int64
	order *list.List // of *memEntry, most recently used at the front
	index map[kvcache.BlockHash]*list.Element
}

// memEntry is one block in the host tier.
type memEntry struct {
	hash kvcache.BlockHash
	kv   []byte
}

func newMemoryTier(capacity int64) *memoryTier {
	return &memoryTier{capacity: capacity, order: list.New(), index: make(map[kvcache.BlockHash]*list.Element)}
}

// put keeps kv (owned by the tier from now on) under hash, evicting the least recently used
// blocks to make room. A block larger than the whole budget is not kept.
func (m *memoryTier) put(hash kvcache.BlockHash, kv []byte) {
	size := int64(len(kv))
	if size > m.capacity {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.index[hash]; ok {
		e := el.Value.(*memEntry)
		m.used += size - int64(len(e.kv))
		e.kv = kv
		m.order.MoveToFront(el)
	} else {
		m.index[hash] = m.order.PushFront(&memEntry{hash: hash, kv: kv})
		m.used += size
	}
	for m.used > m.capacity {
		el := m.order.Back()
		e := el.Value.(*memEntry)
		m.order.Remove(el)
		delete(m.index, e.hash)
		m.used -= int64(len(e.kv))
	}
}

// get returns the block under hash (nil on a miss), marking it recently used. The bytes
// are shared: callers only read them.
func (m *memoryTier) get(hash kvcache.BlockHash) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.index[hash]
	if !ok {
		return nil
	}
	m.order.MoveToFront(el)
	return el.Value.(*memEntry).kv
}

// size returns the blocks and bytes held.
func (m *memoryTier) size() (blocks int, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.index), m.used
}
