package kvcache

import "fmt"

// BlockID is the index of a physical block in the pool. Block 0 is the null block.
type BlockID = int32

// NullBlock is the reserved block that is never allocated.
const NullBlock BlockID = 0

// block is one physical KV block's bookkeeping.
type block struct {
	id  BlockID
	ref int32 // number of block tables holding the block

	// Prefix-cache state, valid while cached is true.
	cached bool
	hash   BlockHash
	parent BlockHash // the chained hash of the block before it
	extra  string    // the extra key (cache salt) it was hashed with
	tokens []int32   // the token ids it holds: a fixed view into BlockPool.tokenStore

	// Free queue links; inFree says whether the block is in the queue.
	prev, next *block
	inFree     bool

	mark uint64 // scratch stamp for duplicate detection (see BlockPool.newEpoch)
}

// BlockPool owns the physical blocks: their reference counts, the free queue (which is also
// the LRU of cached blocks) and the map from block hash to cached block. It knows nothing of
// requests; Manager builds block tables on top of it.
type BlockPool struct {
	blockSize  int
	caching    bool
	blocks     []block
	free       freeQueue
	cached     map[BlockHash]*block
	tokenStore []int32
	epoch      uint64
	onEvent    func(Event) // nil: nobody listens
}

// NewBlockPool returns a pool of numBlocks blocks (block 0 being the null block) of
// blockSize tokens each, with every block but the null block free.
func NewBlockPool(numBlocks, blockSize int, caching bool) (*BlockPool, error) {
	if numBlocks < 2 {
		return nil, fmt.Errorf("kvcache: pool of %d blocks: need at least 2 (one is the null block)", numBlocks)
	}
	if blockSize < 1 {
		return nil, fmt.Errorf("kvcache: block size %d: must be positive", blockSize)
	}
	p := &BlockPool{
		blockSize: blockSize,
		caching:   caching,
		blocks:    make([]block, numBlocks),
		cached:    make(map[BlockHash]*block),
	}
	if caching {
		p.tokenStore = make([]int32, numBlocks*blockSize)
	}
	p.free.init()
	for i := range p.blocks {
		b := &p.blocks[i]
		b.id = BlockID(i)
		if caching {
			b.tokens = p.tokenStore[i*blockSize : (i+1)*blockSize : (i+1)*blockSize]
		}
		if i != int(NullBlock) {
			p.free.pushBack(b)
		}
	}
	return p, nil
}

// NumBlocks returns the total number of blocks, the null block included.
func (p *BlockPool) NumBlocks() int { return len(p.blocks) }

// BlockSize returns the number of tokens a block holds.
func (p *BlockPool) BlockSize() int { return p.blockSize }

// NumFreeBlocks returns the number of blocks that can be allocated now (free blocks,
// including cached ones that would be evicted).
func (p *BlockPool) NumFreeBlocks() int { return p.free.len() }

// NumCachedBlocks returns the number of blocks currently registered in the prefix cache,
// in use or free.
func (p *BlockPool) NumCachedBlocks() int { return len(p.cached) }

// Usage returns the fraction of allocatable blocks (the null block excluded) held by at
// least one request. Free cached blocks count as free.
func (p *BlockPool) Usage() float64 {
	usable := len(p.blocks) - 1
	return float64(usable-p.free.len()) / float64(usable)
}

// get returns the block with the given id, or nil when id is out of range.
func (p *BlockPool) get(id BlockID) *block {
	if id < 0 || int(id) >= len(p.blocks) {
		return nil
	}
	return &p.blocks[id]
}

// newEpoch returns a fresh stamp for marking blocks during one scan.
func (p *BlockPool) newEpoch() uint64 {
	p.epoch++
	return p.epoch
}

// pop takes the least recently used free block, evicts its cached content and returns it
// with a reference count of 1. It returns nil when no block is free.
func (p *BlockPool) pop() *block {
	b := p.free.popFront()
	if b == nil {
		return nil
	}
	p.drop(b, true)
	b.ref = 1
	return b
}

// touch adds a reference to b, unlinking it from the free queue when it was free.
func (p *BlockPool) touch(b *block) {
	if b.ref == 0 && b.inFree {
		p.free.remove(b)
	}
	b.ref++
}

// release drops a reference to b and reports whether b became free. A freed cached block
// goes to the tail of the free queue (still hittable); an uncached one to the head.
func (p *BlockPool) release(b *block) bool {
	b.ref--
	if b.ref > 0 {
		return false
	}
	if b.cached {
		p.free.pushBack(b)
	} else {
		p.free.pushFront(b)
	}
	return true
}

// lookup returns the cached block with hash h, verified to hold tokens after parent with
// the given extra key, or nil on a miss (a collision counts as a miss).
func (p *BlockPool) lookup(h, parent BlockHash, tokens []int32, extra string) *block {
	b := p.cached[h]
	if b == nil || b.parent != parent || b.extra != extra || len(tokens) != len(b.tokens) {
		return nil
	}
	for i, t := range tokens {
		if b.tokens[i] != t {
			return nil
		}
	}
	return b
}

// register caches b under hash h. It does nothing and returns false when caching is off,
// b is already cached, or another block holds h (a duplicate or a collision).
func (p *BlockPool) register(b *block, h, parent BlockHash, tokens []int32, extra string) bool {
	if !p.caching || b.cached || len(tokens) != p.blockSize {
		return false
	}
	if _, taken := p.cached[h]; taken {
		return false
	}
	b.cached = true
	b.hash = h
	b.parent = parent
	b.extra = extra
	copy(b.tokens, tokens)
	p.cached[h] = b
	if p.onEvent != nil {
		p.onEvent(Event{Hash: h, Block: b.id})
	}
	return true
}

// uncache removes b from the prefix cache, if it is there.
func (p *BlockPool) uncache(b *block) { p.drop(b, false) }

// drop removes b from the prefix cache, if it is there; evicted says the pool is reusing
// it (see Event.Evicted).
func (p *BlockPool) drop(b *block, evicted bool) {
	if !b.cached {
		return
	}
	if p.cached[b.hash] == b {
		delete(p.cached, b.hash)
		if p.onEvent != nil {
			p.onEvent(Event{Hash: b.hash, Removed: true, Block: b.id, Evicted: evicted})
		}
	}
	b.cached = false
	b.hash = BlockHash{}
	b.parent = BlockHash{}
	b.extra = ""
}
