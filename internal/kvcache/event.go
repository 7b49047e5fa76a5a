package kvcache

// Event reports one block entering or leaving the prefix cache: its chained hash, and
// whether it left (evicted for reuse, uncached after a failed step, or dropped by
// ResetPrefixCache). A block enters when CacheFullBlocks registers it; a block already
// cached under the same hash produces no event. The events of one Manager, in order,
// replay its cached set exactly: a router that keeps the set per instance knows which
// prompt prefixes each instance can serve from its cache without tokenizing anything.
//
// Block and Evicted serve a second cache tier (host-memory offload): Block is the physical
// block, and Evicted says a removal is an LRU eviction, the pool reusing a free cached
// block: its keys and values are still intact then, until the step that reuses it writes.
type Event struct {
	Hash    BlockHash
	Removed bool
	Block   BlockID
	Evicted bool
}
