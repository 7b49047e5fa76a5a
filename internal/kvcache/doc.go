// Package kvcache manages the paged KV cache's blocks: a fixed pool of fixed-size blocks,
// per-request block tables, reference counts, copy-on-write for forked sequences, and a
// prefix cache of hashed full blocks that lets requests sharing a prompt prefix share its KV.
//
// The package knows blocks, hashes, reference counts and eviction; it never sees the KV
// tensors themselves. The scheduler talks only to Manager; a runner receives block tables
// (BlockTable) and block copy orders (TakeCopies) and moves the bytes.
//
// # Free queue and LRU
//
// Free blocks live in one intrusive doubly linked list. Allocation pops the head; a freed
// block that holds a cached full block (it has a hash) is appended at the tail and stays
// hittable until it reaches the head and is reused, so the queue is also the LRU of cached
// blocks. A freed block holding no cached content is pushed at the head, to be reused before
// any cached block is evicted. A request's blocks are released tail first, so its prefix
// blocks (the ones most likely to be shared again) are evicted last. A prefix hit on a free
// cached block unlinks it in O(1).
//
// # Prefix caching
//
// A full block's hash chains its parent's hash, its token ids and an extra key (the request's
// cache salt): h_i = H(h_{i-1}, tokens_i, salt) with h_{-1} the zero hash. Only full blocks
// whose tokens are all computed are cached. A lookup walks the chain from the first block and
// stops at the first miss; a hit is verified against the block's stored token ids, stored
// parent hash and stored salt, so a hash collision degrades to a miss instead of serving the
// wrong KV. The last prompt token is always left to compute (the engine needs its logits).
//
// Block 0 is the null block: it is never allocated, freed or cached, and never appears in a
// block table; a runner may use it as padding.
package kvcache
