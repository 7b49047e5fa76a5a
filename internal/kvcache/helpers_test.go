package kvcache

import (
	"maps"
	"reflect"
	"slices"
	"testing"
)

func newTestManager(t testing.TB, cfg Config) *Manager {
	t.Helper()
	m, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustCheck(t testing.TB, m *Manager) {
	t.Helper()
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
}

// seqTokens returns n tokens starting at start, counting up.
func seqTokens(start, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(start + i)
	}
	return out
}

// admit runs a whole prompt through a new request in one step: lookup, allocate, cache.
// It returns the number of cached (hit) tokens.
func admit(t testing.TB, m *Manager, id RequestID, tokens []int32, salt string) int {
	t.Helper()
	hits, n := m.GetComputedBlocks(tokens, salt)
	ok, err := m.Allocate(id, Alloc{NumComputed: n, NumNew: len(tokens) - n, Computed: hits, Salt: salt})
	if err != nil || !ok {
		t.Fatalf("admit %s: ok %v, err %v", id, ok, err)
	}
	if err := m.CacheFullBlocks(id, tokens, len(tokens)); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, m)
	return n
}

// snapshot captures all of a Manager's state, to compare before and after a failed call.
type snapshot struct {
	Free    []BlockID
	Refs    []int32
	Cached  map[BlockHash]BlockID
	Tables  map[RequestID][]BlockID
	Hashes  map[RequestID][]BlockHash
	NCached map[RequestID]int
	Pending []CopyOp
}

func takeSnapshot(m *Manager) snapshot {
	s := snapshot{
		Cached: map[BlockHash]BlockID{}, Tables: map[RequestID][]BlockID{},
		Hashes: map[RequestID][]BlockHash{}, NCached: map[RequestID]int{},
		Pending: slices.Clone(m.pending),
	}
	for b := m.pool.free.front(); b != nil && b != &m.pool.free.root; b = b.next {
		s.Free = append(s.Free, b.id)
	}
	for i := range m.pool.blocks {
		s.Refs = append(s.Refs, m.pool.blocks[i].ref)
	}
	for h, b := range m.pool.cached {
		s.Cached[h] = b.id
	}
	for id, q := range maps.All(m.seqs) {
		s.Tables[id] = slices.Clone(q.table)
		s.Hashes[id] = slices.Clone(q.hashes)
		s.NCached[id] = q.numCached
	}
	return s
}

func assertUnchanged(t *testing.T, before snapshot, m *Manager) {
	t.Helper()
	if after := takeSnapshot(m); !reflect.DeepEqual(before, after) {
		t.Fatalf("state changed:\nbefore %+v\nafter  %+v", before, after)
	}
}
