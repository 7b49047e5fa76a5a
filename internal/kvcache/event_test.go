package kvcache

import (
	"maps"
	"slices"
	"testing"
)

// TestEventsReplayCachedSet checks that a listener replaying the events holds exactly the
// pool's cached hashes after caching, eviction for reuse, uncaching and a reset.
func TestEventsReplayCachedSet(t *testing.T) {
	replayed := map[BlockHash]bool{}
	var events int
	m := newTestManager(t, Config{NumBlocks: 9, BlockSize: 4, OnEvent: func(e Event) {
		events++
		if e.Removed {
			if !replayed[e.Hash] {
				t.Errorf("removal of %x, which never entered", e.Hash)
			}
			delete(replayed, e.Hash)
			return
		}
		if replayed[e.Hash] {
			t.Errorf("%x entered twice", e.Hash)
		}
		replayed[e.Hash] = true
	}})
	same := func(step string) {
		t.Helper()
		want := slices.SortedFunc(maps.Keys(m.pool.cached), compareHash)
		got := slices.SortedFunc(maps.Keys(replayed), compareHash)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: replayed %d hashes, pool caches %d", step, len(got), len(want))
		}
	}
	admit(t, m, "a", seqTokens(0, 16), "")
	same("a cached")
	if n := len(replayed); n != 4 {
		t.Fatalf("after one 16-token prompt: %d cached hashes, want 4", n)
	}
	admit(t, m, "b", seqTokens(0, 16), "") // a full hit: no new block, no event
	same("b hit")
	m.Free("a")
	m.Free("b")
	admit(t, m, "c", seqTokens(100, 32), "") // needs all 8 blocks: evicts a's four
	same("c evicts")
	m.Uncache("c")
	same("c uncached")
	m.Free("c")
	admit(t, m, "d", seqTokens(200, 8), "salt")
	m.Free("d")
	if !m.ResetPrefixCache() {
		t.Fatal("reset refused with no request")
	}
	same("reset")
	if len(replayed) != 0 || events == 0 {
		t.Fatalf("after reset: %d hashes left, %d events", len(replayed), events)
	}
}

func compareHash(a, b BlockHash) int { return slices.Compare(a[:], b[:]) }

// TestChainHashesMatchManager checks that ChainHashes names the blocks a Manager caches.
func TestChainHashesMatchManager(t *testing.T) {
	var got []BlockHash
	m := newTestManager(t, Config{NumBlocks: 9, BlockSize: 4, OnEvent: func(e Event) { got = append(got, e.Hash) }})
	tokens := seqTokens(7, 14) // three full blocks and a partial one
	admit(t, m, "a", tokens, "s")
	want := ChainHashes(tokens, 4, "s")
	if !slices.Equal(got, want) || len(want) != 3 {
		t.Fatalf("manager cached %x, ChainHashes gives %x", got, want)
	}
	if other := ChainHashes(tokens, 4, "t"); other[0] == want[0] {
		t.Fatal("the salt does not change the hashes")
	}
}

// TestEvictedEvents: a cached block reused by the pool leaves with Evicted set and its
// block id (its contents still intact then); one taken out by Uncache leaves without.
// PeekPrefix counts the hits without adding to the stats.
func TestEvictedEvents(t *testing.T) {
	var evs []Event
	m := newTestManager(t, Config{NumBlocks: 5, BlockSize: 4, OnEvent: func(e Event) { evs = append(evs, e) }})
	a := seqTokens(1, 9) // two full blocks and one token
	admit(t, m, "a", a, "")
	table := m.BlockTable("a")
	stats := m.PrefixStats()
	if n := m.PeekPrefix(a, ""); n != 2 || m.PrefixStats() != stats {
		t.Fatalf("PeekPrefix %d (want 2), stats %+v -> %+v", n, stats, m.PrefixStats())
	}
	if n := m.PeekPrefix(a[:8], ""); n != 1 {
		t.Fatalf("PeekPrefix of 8 tokens %d, want 1 (the last token is computed)", n)
	}
	m.Free("a")
	evs = nil
	admit(t, m, "b", seqTokens(50, 16), "") // four blocks: the pool reuses all of a's
	var evicted []BlockID
	for _, e := range evs {
		if e.Removed {
			if !e.Evicted {
				t.Errorf("removal by reuse without Evicted: %+v", e)
			}
			evicted = append(evicted, e.Block)
		}
	}
	slices.Sort(evicted)
	want := slices.Sorted(slices.Values(table[:2]))
	if !slices.Equal(evicted, want) {
		t.Errorf("evicted blocks %v, want a's cached %v", evicted, want)
	}
	evs = nil
	m.Uncache("b")
	if len(evs) != 4 || slices.ContainsFunc(evs, func(e Event) bool { return e.Evicted || !e.Removed }) {
		t.Errorf("Uncache events %+v: want 4 removals, none evicted", evs)
	}
}
