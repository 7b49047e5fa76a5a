package kvcache

import (
	"fmt"
	"slices"
)

// DefaultBlockSize is the number of tokens per block when Config.BlockSize is zero.
const DefaultBlockSize = 16

// RequestID names a sequence whose blocks the Manager tracks (a request, or one of the n
// sequences of a parallel-sampling request).
type RequestID string

// Config configures a Manager.
type Config struct {
	// NumBlocks is the total number of blocks in the pool, the null block included
	// (Sizing.NumBlocks).
	NumBlocks int
	// BlockSize is the number of tokens per block; 0 means DefaultBlockSize.
	BlockSize int
	// DisablePrefixCaching turns the prefix cache off (it is on by default).
	DisablePrefixCaching bool
	// Hash computes block hashes; nil means DefaultHash. Tests inject weak functions here.
	Hash HashFunc
	// OnEvent, when set, is called for every block that enters or leaves the prefix cache
	// (see Event), from the goroutine that calls the Manager: it must return quickly.
	OnEvent func(Event)
}

// Alloc describes one Allocate call: the KV slots a request needs for this step.
type Alloc struct {
	// NumComputed is the number of the request's tokens whose KV is already in its blocks.
	// For a request the Manager does not hold yet it must equal len(Computed) x block size
	// (the cached tokens GetComputedBlocks returned, or 0).
	NumComputed int
	// NumNew is the number of tokens to compute in this step, speculative tokens included:
	// after Allocate the request has slots for NumComputed+NumNew tokens.
	NumNew int
	// Computed are the prefix-cache hit blocks from GetComputedBlocks; only for a request
	// the Manager does not hold yet.
	Computed []BlockID
	// Salt is the request's cache salt (the extra key of its block hashes); only read for a
	// request the Manager does not hold yet.
	Salt string
}

// CopyOp orders the runner to copy block Src's KV into block Dst before the step's forward
// pass writes any new KV (copy-on-write of a shared, partially filled block).
type CopyOp struct {
	Src, Dst BlockID
}

// PrefixStats counts prefix cache lookups, in tokens, since the Manager was made.
type PrefixStats struct {
	// Queries is the number of prompt tokens looked up by GetComputedBlocks.
	Queries int64
	// Hits is the number of those tokens found in the cache.
	Hits int64
}

// seq is the Manager's state for one request.
type seq struct {
	table  []BlockID   // logical block i -> physical block
	hashes []BlockHash // chained hashes of the first len(hashes) full blocks
	// numCached is the number of leading full blocks already offered to the prefix cache.
	numCached int
	salt      string
}

// Manager is the KV cache manager the scheduler uses: it gives each request a block table,
// shares prefix-cache hits and forked sequences' blocks by reference count, orders copies on
// write, and evicts cached blocks least recently used. It is not safe for concurrent use:
// the engine loop owns it.
type Manager struct {
	pool    *BlockPool
	hash    HashFunc
	seqs    map[RequestID]*seq
	pending []CopyOp
	stats   PrefixStats
}

// NewManager returns a Manager over a fresh pool described by cfg.
func NewManager(cfg Config) (*Manager, error) {
	bs := cfg.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	pool, err := NewBlockPool(cfg.NumBlocks, bs, !cfg.DisablePrefixCaching)
	if err != nil {
		return nil, err
	}
	pool.onEvent = cfg.OnEvent
	h := cfg.Hash
	if h == nil {
		h = DefaultHash
	}
	return &Manager{pool: pool, hash: h, seqs: make(map[RequestID]*seq)}, nil
}

// BlockSize returns the number of tokens per block.
func (m *Manager) BlockSize() int { return m.pool.blockSize }

// NumBlocks returns the total number of blocks, the null block included.
func (m *Manager) NumBlocks() int { return m.pool.NumBlocks() }

// NumFreeBlocks returns the number of blocks that can be allocated now.
func (m *Manager) NumFreeBlocks() int { return m.pool.NumFreeBlocks() }

// NumCachedBlocks returns the number of blocks in the prefix cache (in use or free).
func (m *Manager) NumCachedBlocks() int { return m.pool.NumCachedBlocks() }

// Usage returns the fraction of allocatable blocks in use (the kv_cache_usage_perc metric
// as a fraction in [0, 1]).
func (m *Manager) Usage() float64 { return m.pool.Usage() }

// PrefixCacheEnabled reports whether prefix caching is on.
func (m *Manager) PrefixCacheEnabled() bool { return m.pool.caching }

// PrefixStats returns the prefix cache counters.
func (m *Manager) PrefixStats() PrefixStats { return m.stats }

// HasRequest reports whether the Manager holds blocks (or a block table) for id.
func (m *Manager) HasRequest(id RequestID) bool { return m.seqs[id] != nil }

// NumRequests returns the number of requests the Manager holds.
func (m *Manager) NumRequests() int { return len(m.seqs) }

// BlocksFor returns the number of blocks needed to hold numTokens tokens.
func (m *Manager) BlocksFor(numTokens int) int {
	bs := m.pool.blockSize
	n := numTokens / bs
	if numTokens%bs != 0 {
		n++
	}
	return n
}

// NumBlocksOf returns the number of blocks request id holds (0 when id is unknown).
func (m *Manager) NumBlocksOf(id RequestID) int {
	if s := m.seqs[id]; s != nil {
		return len(s.table)
	}
	return 0
}

// BlockTable returns a copy of id's block table (nil when id is unknown).
func (m *Manager) BlockTable(id RequestID) []int32 {
	return m.AppendBlockTable(nil, id)
}

// AppendBlockTable appends id's block table to dst and returns it, for callers that reuse
// a buffer every step.
func (m *Manager) AppendBlockTable(dst []int32, id RequestID) []int32 {
	s := m.seqs[id]
	if s == nil {
		return dst
	}
	return append(dst, s.table...)
}

// GetComputedBlocks looks up the longest verified cached prefix of tokens (a new or resumed
// request's tokens) hashed with salt. It returns the hit blocks and the number of tokens
// they hold, a multiple of the block size capped below len(tokens) so that at least the
// last token is left to compute. It takes no references: pass the blocks to Allocate before
// anything else allocates. Each call adds to PrefixStats (a request retried after a failed
// Allocate is counted again).
func (m *Manager) GetComputedBlocks(tokens []int32, salt string) ([]BlockID, int) {
	return m.lookupPrefix(tokens, salt, len(tokens)-1, true)
}

// PeekPrefix returns the number of leading full blocks of tokens that GetComputedBlocks
// would find in the cache now, without counting the lookup in PrefixStats: a request waiting
// for its blocks from another tier asks which ones it lacks.
func (m *Manager) PeekPrefix(tokens []int32, salt string) int {
	_, n := m.lookupPrefix(tokens, salt, len(tokens)-1, false)
	return n / m.pool.blockSize
}

// lookupPrefix walks the hash chain over tokens and returns the hit blocks holding at most
// maxTokens tokens.
func (m *Manager) lookupPrefix(tokens []int32, salt string, maxTokens int, count bool) ([]BlockID, int) {
	if count {
		m.stats.Queries += int64(len(tokens))
	}
	if !m.pool.caching || maxTokens <= 0 {
		return nil, 0
	}
	bs := m.pool.blockSize
	maxBlocks := min(maxTokens, len(tokens)) / bs
	var hits []BlockID
	var parent BlockHash
	epoch := m.pool.newEpoch()
	for i := 0; i < maxBlocks; i++ {
		toks := tokens[i*bs : (i+1)*bs]
		h := m.hash(parent, toks, salt)
		b := m.pool.lookup(h, parent, toks, salt)
		if b == nil || b.mark == epoch {
			break
		}
		b.mark = epoch
		hits = append(hits, b.id)
		parent = h
	}
	n := len(hits) * bs
	if count {
		m.stats.Hits += int64(n)
	}
	return hits, n
}

// Allocate gives request id slots for a.NumComputed+a.NumNew tokens. For a request the
// Manager does not hold yet it first takes the prefix-cache hit blocks a.Computed. Blocks
// in the range this step writes that are shared with other requests are replaced by private
// ones (copy-on-write; see TakeCopies), and cached blocks it would overwrite leave the
// cache. It returns false, changing nothing, when the pool has too few free blocks; it
// returns an error, changing nothing, on inconsistent arguments.
func (m *Manager) Allocate(id RequestID, a Alloc) (bool, error) {
	bs := m.pool.blockSize
	if a.NumComputed < 0 || a.NumNew < 0 || a.NumComputed+a.NumNew < 0 {
		return false, fmt.Errorf("kvcache: allocate %q: bad token counts (computed %d, new %d)", id, a.NumComputed, a.NumNew)
	}
	s := m.seqs[id]
	table := []BlockID(nil)
	evictable := 0 // hit blocks now free: taking them shrinks the free queue
	if s == nil {
		if a.NumComputed != len(a.Computed)*bs {
			return false, fmt.Errorf("kvcache: allocate %q: %d computed tokens but %d hit blocks of %d tokens", id, a.NumComputed, len(a.Computed), bs)
		}
		epoch := m.pool.newEpoch()
		var parent BlockHash
		for _, bid := range a.Computed {
			b := m.pool.get(bid)
			if b == nil || bid == NullBlock || !b.cached {
				return false, fmt.Errorf("kvcache: allocate %q: hit block %d is not a cached block (evicted since the lookup?)", id, bid)
			}
			if b.mark == epoch {
				return false, fmt.Errorf("kvcache: allocate %q: hit block %d listed twice", id, bid)
			}
			if b.parent != parent || b.extra != a.Salt {
				return false, fmt.Errorf("kvcache: allocate %q: hit block %d does not continue the hit chain (reused since the lookup?)", id, bid)
			}
			b.mark = epoch
			parent = b.hash
			if b.ref == 0 {
				evictable++
			}
		}
		table = a.Computed
	} else {
		if len(a.Computed) > 0 {
			return false, fmt.Errorf("kvcache: allocate %q: hit blocks given for a request that already has blocks", id)
		}
		if a.NumComputed > len(s.table)*bs {
			return false, fmt.Errorf("kvcache: allocate %q: %d computed tokens but only %d slots", id, a.NumComputed, len(s.table)*bs)
		}
		table = s.table
	}

	need := m.BlocksFor(a.NumComputed + a.NumNew)
	fresh := max(0, need-len(table))
	writeStart, writeEnd := a.NumComputed/bs, min(need, len(table))
	if a.NumNew == 0 {
		writeEnd = writeStart
	}
	cow := 0
	for i := writeStart; i < writeEnd; i++ {
		if m.pool.blocks[table[i]].ref > 1 {
			cow++
		}
	}
	if fresh+cow+evictable > m.pool.NumFreeBlocks() {
		return false, nil
	}

	// Commit: nothing below can fail.
	if s == nil {
		s = &seq{salt: a.Salt, table: make([]BlockID, 0, need)}
		for _, bid := range a.Computed {
			b := &m.pool.blocks[bid]
			m.pool.touch(b)
			s.table = append(s.table, bid)
			s.hashes = append(s.hashes, b.hash)
		}
		s.numCached = len(a.Computed)
		m.seqs[id] = s
	}
	if writeStart < writeEnd {
		// This step rewrites blocks from writeStart on: they are no longer finalized.
		s.numCached = min(s.numCached, writeStart)
		s.hashes = s.hashes[:min(len(s.hashes), writeStart)]
	}
	for i := writeStart; i < writeEnd; i++ {
		b := &m.pool.blocks[s.table[i]]
		if b.ref > 1 {
			nb := m.pool.pop()
			if i == writeStart && a.NumComputed%bs != 0 {
				m.pending = append(m.pending, CopyOp{Src: b.id, Dst: nb.id})
			}
			m.release(b)
			s.table[i] = nb.id
		} else {
			m.pool.uncache(b)
		}
	}
	for range fresh {
		s.table = append(s.table, m.pool.pop().id)
	}
	return true, nil
}

// release drops one reference to b; a block that becomes free is no longer a valid copy
// destination, so pending copies into it are dropped.
func (m *Manager) release(b *block) {
	if !m.pool.release(b) || len(m.pending) == 0 {
		return
	}
	m.pending = slices.DeleteFunc(m.pending, func(op CopyOp) bool { return op.Dst == b.id })
}

// TakeCopies returns the block copies ordered since the last call, in order, and forgets
// them. The runner must perform them, in order, before the step's forward pass.
func (m *Manager) TakeCopies() []CopyOp {
	ops := m.pending
	m.pending = nil
	return ops
}

// CacheFullBlocks offers request id's newly completed full blocks to the prefix cache after
// a step. tokens are the request's token ids (at least its first numComputed) and
// numComputed the number of tokens whose KV is now finalized; only blocks filled entirely
// by those tokens are cached. Blocks already cached, or whose hash another block holds,
// are left as they are.
func (m *Manager) CacheFullBlocks(id RequestID, tokens []int32, numComputed int) error {
	s := m.seqs[id]
	if s == nil {
		return fmt.Errorf("kvcache: cache blocks of %q: unknown request", id)
	}
	bs := m.pool.blockSize
	if numComputed < 0 || numComputed > len(tokens) || numComputed > len(s.table)*bs {
		return fmt.Errorf("kvcache: cache blocks of %q: %d computed tokens out of range (%d tokens, %d slots)", id, numComputed, len(tokens), len(s.table)*bs)
	}
	if !m.pool.caching {
		return nil
	}
	full := numComputed / bs
	for i := len(s.hashes); i < full; i++ {
		var parent BlockHash
		if i > 0 {
			parent = s.hashes[i-1]
		}
		s.hashes = append(s.hashes, m.hash(parent, tokens[i*bs:(i+1)*bs], s.salt))
	}
	for i := s.numCached; i < full; i++ {
		var parent BlockHash
		if i > 0 {
			parent = s.hashes[i-1]
		}
		m.pool.register(&m.pool.blocks[s.table[i]], s.hashes[i], parent, tokens[i*bs:(i+1)*bs], s.salt)
	}
	s.numCached = max(s.numCached, full)
	return nil
}

// Free releases all of request id's blocks, last block first (so its prefix is evicted
// last), and forgets the request. Freeing an unknown request does nothing.
func (m *Manager) Free(id RequestID) {
	s := m.seqs[id]
	if s == nil {
		return
	}
	for i := len(s.table) - 1; i >= 0; i-- {
		m.release(&m.pool.blocks[s.table[i]])
	}
	delete(m.seqs, id)
}

// Truncate shrinks request id to numTokens tokens (speculative-decoding rollback or a
// recompute point): blocks past the new length are released, last first, and the blocks
// still held past the last full block stop counting as finalized.
func (m *Manager) Truncate(id RequestID, numTokens int) error {
	s := m.seqs[id]
	if s == nil {
		return fmt.Errorf("kvcache: truncate %q: unknown request", id)
	}
	if numTokens < 0 {
		return fmt.Errorf("kvcache: truncate %q to %d tokens: negative length", id, numTokens)
	}
	keep := m.BlocksFor(numTokens)
	for i := len(s.table) - 1; i >= keep; i-- {
		m.release(&m.pool.blocks[s.table[i]])
	}
	if keep < len(s.table) {
		s.table = s.table[:keep]
	}
	full := numTokens / m.pool.blockSize
	s.numCached = min(s.numCached, full)
	s.hashes = s.hashes[:min(len(s.hashes), full)]
	return nil
}

// Uncache takes request id's blocks out of the prefix cache; the request keeps them.
// After a failed step, blocks offered to the cache before their keys and values were
// written must not serve later hits. A block shared with other requests loses its entry
// too, which costs only future hits. An unknown request does nothing.
func (m *Manager) Uncache(id RequestID) {
	s := m.seqs[id]
	if s == nil {
		return
	}
	for _, b := range s.table {
		m.pool.uncache(&m.pool.blocks[b])
	}
	s.numCached = 0
}

// ResetPrefixCache empties the prefix cache. It refuses (returning false) while any request
// holds blocks, since their cached blocks are in use.
func (m *Manager) ResetPrefixCache() bool {
	if len(m.seqs) > 0 {
		return false
	}
	for _, b := range m.pool.cached {
		m.pool.uncache(b)
	}
	return true
}

// Fork makes child share all of parent's blocks (n > 1 parallel sampling): the child gets a
// copy of the parent's block table and every block gains a reference. Whichever sequence
// first writes into a shared block gets a private copy (see Allocate and TakeCopies).
func (m *Manager) Fork(parent, child RequestID) error {
	p := m.seqs[parent]
	if p == nil {
		return fmt.Errorf("kvcache: fork %q from %q: unknown parent", child, parent)
	}
	if m.seqs[child] != nil {
		return fmt.Errorf("kvcache: fork %q from %q: child already exists", child, parent)
	}
	c := &seq{
		table:     slices.Clone(p.table),
		hashes:    slices.Clone(p.hashes),
		numCached: p.numCached,
		salt:      p.salt,
	}
	for _, bid := range c.table {
		m.pool.touch(&m.pool.blocks[bid])
	}
	m.seqs[child] = c
	return nil
}

// Drop releases request id's logical blocks [from, from+n) and closes the gap: block
// from+n becomes logical block from (a KV policy dropping tokens; see Policy). The blocks
// from on stop counting as finalized, since their tokens no longer follow the hash chain.
func (m *Manager) Drop(id RequestID, from, n int) error {
	s := m.seqs[id]
	if s == nil {
		return fmt.Errorf("kvcache: drop blocks of %q: unknown request", id)
	}
	if from < 0 || n < 0 || from+n > len(s.table) {
		return fmt.Errorf("kvcache: drop blocks [%d, %d) of %q: out of its %d blocks", from, from+n, id, len(s.table))
	}
	if n == 0 {
		return nil
	}
	for i := from + n - 1; i >= from; i-- {
		m.release(&m.pool.blocks[s.table[i]])
	}
	s.table = slices.Delete(s.table, from, from+n)
	s.numCached = min(s.numCached, from)
	s.hashes = s.hashes[:min(len(s.hashes), from)]
	return nil
}

// Privatize makes request id the only holder of its logical blocks from on, so that their
// contents may be rewritten in place (keys rotated after a drop): a block shared with
// other requests is replaced by a private copy (ordered by TakeCopies), and a block only
// it holds leaves the prefix cache. It returns false, changing nothing, when the pool has
// too few free blocks for the copies.
func (m *Manager) Privatize(id RequestID, from int) (bool, error) {
	s := m.seqs[id]
	if s == nil {
		return false, fmt.Errorf("kvcache: privatize blocks of %q: unknown request", id)
	}
	return m.PrivatizeRange(id, from, len(s.table))
}

// PrivatizeRange is Privatize for the logical blocks [from, to) only.
func (m *Manager) PrivatizeRange(id RequestID, from, to int) (bool, error) {
	s := m.seqs[id]
	if s == nil {
		return false, fmt.Errorf("kvcache: privatize blocks of %q: unknown request", id)
	}
	if from < 0 || from > to || to > len(s.table) {
		return false, fmt.Errorf("kvcache: privatize blocks [%d, %d) of %q: out of its %d blocks", from, to, id, len(s.table))
	}
	shared := 0
	for _, b := range s.table[from:to] {
		if m.pool.blocks[b].ref > 1 {
			shared++
		}
	}
	if shared > m.pool.NumFreeBlocks() {
		return false, nil
	}
	for i := from; i < to; i++ {
		b := &m.pool.blocks[s.table[i]]
		if b.ref > 1 {
			nb := m.pool.pop()
			m.pending = append(m.pending, CopyOp{Src: b.id, Dst: nb.id})
			m.release(b)
			s.table[i] = nb.id
		} else {
			m.pool.uncache(b)
		}
	}
	s.numCached = min(s.numCached, from)
	s.hashes = s.hashes[:min(len(s.hashes), from)]
	return true, nil
}
