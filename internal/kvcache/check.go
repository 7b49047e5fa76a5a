package kvcache

import (
	"errors"
	"fmt"
)

// Check verifies the Manager's invariants and returns every violation found (nil when all
// hold): the free queue is a well-formed list of exactly the blocks with no references;
// free + used = total - 1 (the null block); every block's reference count equals the number
// of block tables holding it; no block appears twice in one table and the null block in
// none; the hash map's entries point to cached blocks holding that hash and every cached
// block is in the map; pending copies point at live blocks. It costs O(blocks + table
// entries) and is meant for tests.
func (m *Manager) Check() error {
	p := m.pool
	var errs []error
	fail := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf("kvcache check: "+format, args...))
		}
	}

	// Free queue: walk it both ways.
	n := 0
	for b, prev := p.free.root.next, &p.free.root; b != &p.free.root; prev, b = b, b.next {
		if b.prev != prev {
			fail("free queue: block %d has a broken back link", b.id)
			break
		}
		if !b.inFree {
			fail("free queue: block %d is linked but not marked free", b.id)
		}
		if b.id == NullBlock {
			fail("free queue: holds the null block")
		}
		n++
		if n > len(p.blocks) {
			fail("free queue: cycle")
			break
		}
	}
	if n != p.free.len() {
		fail("free queue: %d blocks linked, length says %d", n, p.free.len())
	}

	// Reference counts against the block tables.
	refs := make([]int32, len(p.blocks))
	for id, s := range m.seqs {
		epoch := p.newEpoch()
		for i, bid := range s.table {
			b := p.get(bid)
			if b == nil || bid == NullBlock {
				fail("request %q: table entry %d is block %d", id, i, bid)
				continue
			}
			if b.mark == epoch {
				fail("request %q: block %d appears twice in its table", id, bid)
			}
			b.mark = epoch
			refs[bid]++
		}
		if s.numCached > len(s.table) {
			fail("request %q: %d blocks marked cached but only %d in its table", id, s.numCached, len(s.table))
		}
		if len(s.hashes) > len(s.table) {
			fail("request %q: %d block hashes but only %d blocks", id, len(s.hashes), len(s.table))
		}
		if p.caching && s.numCached > len(s.hashes) {
			fail("request %q: %d blocks marked cached but only %d hashes", id, s.numCached, len(s.hashes))
		}
	}
	used, free := 0, 0
	for i := range p.blocks {
		b := &p.blocks[i]
		if b.id != BlockID(i) {
			fail("block %d: has id %d", i, b.id)
		}
		if i == int(NullBlock) {
			if b.ref != 0 || b.inFree || b.cached {
				fail("null block: ref %d, free %v, cached %v", b.ref, b.inFree, b.cached)
			}
			continue
		}
		if b.ref != refs[i] {
			fail("block %d: ref count %d but held by %d block tables", i, b.ref, refs[i])
		}
		switch {
		case b.ref < 0:
			fail("block %d: negative ref count %d", i, b.ref)
		case b.ref == 0 && !b.inFree:
			fail("block %d: unreferenced but not in the free queue (leak)", i)
		case b.ref > 0 && b.inFree:
			fail("block %d: ref count %d but in the free queue", i, b.ref)
		}
		if b.inFree {
			free++
		} else {
			used++
		}
		if b.cached && p.cached[b.hash] != b {
			fail("block %d: marked cached but the hash map does not point to it", i)
		}
	}
	if free+used != len(p.blocks)-1 {
		fail("free %d + used %d != %d allocatable blocks", free, used, len(p.blocks)-1)
	}
	if free != p.free.len() {
		fail("%d blocks marked free, free queue holds %d", free, p.free.len())
	}

	// Hash map.
	if !p.caching && len(p.cached) > 0 {
		fail("prefix caching is off but %d blocks are cached", len(p.cached))
	}
	for h, b := range p.cached {
		if b == nil || !b.cached || b.hash != h {
			fail("hash map: entry %x points to a block not holding that hash", h[:4])
		}
	}

	// Pending copies.
	for _, op := range m.pending {
		src, dst := p.get(op.Src), p.get(op.Dst)
		if src == nil || dst == nil || op.Src == op.Dst || op.Src == NullBlock || op.Dst == NullBlock {
			fail("pending copy %d -> %d: bad block ids", op.Src, op.Dst)
			continue
		}
		if dst.ref == 0 {
			fail("pending copy %d -> %d: destination is free", op.Src, op.Dst)
		}
	}
	return errors.Join(errs...)
}
