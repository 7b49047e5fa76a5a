package kvcache

import (
	"slices"
	"testing"
)

func TestPrefixHitSamePromptTwice(t *testing.T) {
	cases := []struct {
		promptLen, wantHit int
	}{
		{40, 32}, {33, 32}, {32, 16}, {17, 16}, {16, 0}, {15, 0}, {1, 0}, {0, 0},
	}
	for _, tc := range cases {
		for _, stillRunning := range []bool{false, true} {
			m := newTestManager(t, Config{NumBlocks: 64})
			prompt := seqTokens(100, tc.promptLen)
			if tc.promptLen > 0 {
				if n := admit(t, m, "a", prompt, ""); n != 0 {
					t.Fatalf("first request hit %d tokens in an empty cache", n)
				}
			}
			tableA := m.BlockTable("a")
			if !stillRunning {
				m.Free("a")
			}
			hits, n := m.GetComputedBlocks(prompt, "")
			if n != tc.wantHit || len(hits)*16 != n {
				t.Fatalf("prompt %d (running %v): hit %d tokens in %d blocks, want %d", tc.promptLen, stillRunning, n, len(hits), tc.wantHit)
			}
			if !slices.Equal(hits, tableA[:len(hits)]) {
				t.Fatalf("hit blocks %v are not the first request's blocks %v", hits, tableA)
			}
			if tc.promptLen == 0 {
				continue
			}
			ok, err := m.Allocate("b", Alloc{NumComputed: n, NumNew: tc.promptLen - n, Computed: hits})
			if !ok || err != nil {
				t.Fatalf("allocate: %v %v", ok, err)
			}
			mustCheck(t, m)
			if tb := m.BlockTable("b"); !slices.Equal(tb[:len(hits)], hits) || len(tb) != (tc.promptLen+15)/16 {
				t.Fatalf("table %v does not start with hits %v", tb, hits)
			}
			st := m.PrefixStats()
			if st.Queries != 2*int64(tc.promptLen) || st.Hits != int64(tc.wantHit) {
				t.Fatalf("stats %+v, want %d queries and %d hits", st, 2*tc.promptLen, tc.wantHit)
			}
			m.Free("a")
			m.Free("b")
			mustCheck(t, m)
			if m.NumFreeBlocks() != 63 {
				t.Fatalf("%d free blocks after freeing everything", m.NumFreeBlocks())
			}
		}
	}
}

func TestPrefixSaltIsolation(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 64, BlockSize: 4})
	prompt := seqTokens(0, 21)
	admit(t, m, "a", prompt, "tenant-a")
	for _, tc := range []struct {
		salt string
		want int
	}{{"tenant-a", 20}, {"tenant-b", 0}, {"", 0}, {"tenant-a ", 0}} {
		if _, n := m.GetComputedBlocks(prompt, tc.salt); n != tc.want {
			t.Errorf("salt %q: hit %d tokens, want %d", tc.salt, n, tc.want)
		}
	}
	// The same prompt under another salt is cached separately.
	admit(t, m, "b", prompt, "tenant-b")
	if _, n := m.GetComputedBlocks(prompt, "tenant-b"); n != 20 {
		t.Errorf("tenant-b after its own request: hit %d, want 20", n)
	}
}

func TestPrefixCachingDisabled(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 64, BlockSize: 4, DisablePrefixCaching: true})
	prompt := seqTokens(0, 21)
	admit(t, m, "a", prompt, "")
	m.Free("a")
	if hits, n := m.GetComputedBlocks(prompt, ""); n != 0 || hits != nil {
		t.Fatalf("caching off: hit %d tokens", n)
	}
	if m.NumCachedBlocks() != 0 || m.PrefixCacheEnabled() {
		t.Fatalf("caching off: %d cached blocks", m.NumCachedBlocks())
	}
}

func TestPrefixDivergingSuffix(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 64, BlockSize: 4})
	a := seqTokens(0, 13)
	admit(t, m, "a", a, "")
	b := slices.Clone(a)
	b[9] = 99 // diverges inside block 2
	if _, n := m.GetComputedBlocks(b, ""); n != 8 {
		t.Fatalf("diverging at token 9: hit %d, want 8", n)
	}
	c := slices.Clone(a)
	c[0] = 99 // diverges in the first block: nothing after it may hit
	if _, n := m.GetComputedBlocks(c, ""); n != 0 {
		t.Fatalf("diverging at token 0: hit %d, want 0", n)
	}
}

func TestPrefixLRUEviction(t *testing.T) {
	// Six usable blocks of 4 tokens; three requests of 5 tokens take two blocks each (one
	// full, cached; one partial).
	setup := func(t *testing.T) (*Manager, [][]int32) {
		m := newTestManager(t, Config{NumBlocks: 7, BlockSize: 4})
		prompts := [][]int32{seqTokens(0, 5), seqTokens(100, 5), seqTokens(200, 5)}
		for i, p := range prompts {
			admit(t, m, RequestID(rune('a'+i)), p, "")
		}
		for i := range prompts {
			m.Free(RequestID(rune('a' + i)))
			mustCheck(t, m)
		}
		if m.NumFreeBlocks() != 6 || m.NumCachedBlocks() != 3 {
			t.Fatalf("%d free, %d cached blocks", m.NumFreeBlocks(), m.NumCachedBlocks())
		}
		return m, prompts
	}
	hitsOf := func(m *Manager, prompts [][]int32) []int {
		var out []int
		for _, p := range prompts {
			_, n := m.GetComputedBlocks(p, "")
			out = append(out, n)
		}
		return out
	}

	t.Run("uncached blocks go first, then least recently freed", func(t *testing.T) {
		m, prompts := setup(t)
		admit(t, m, "d", seqTokens(300, 16), "") // 4 blocks: the 3 partial ones and a's
		if got := hitsOf(m, prompts); !slices.Equal(got, []int{0, 4, 4}) {
			t.Fatalf("hits %v, want a evicted only", got)
		}
		admit(t, m, "e", seqTokens(400, 3), "")
		if got := hitsOf(m, prompts); !slices.Equal(got, []int{0, 0, 4}) {
			t.Fatalf("hits %v, want b evicted next", got)
		}
	})
	t.Run("a hit refreshes recency", func(t *testing.T) {
		m, prompts := setup(t)
		admit(t, m, "a2", prompts[0], "") // hits a's block, taking it off the free queue
		m.Free("a2")                      // ...and puts it back at the tail
		mustCheck(t, m)
		admit(t, m, "d", seqTokens(300, 16), "")
		if got := hitsOf(m, prompts); !slices.Equal(got, []int{4, 0, 4}) {
			t.Fatalf("hits %v, want b evicted (a was used last)", got)
		}
	})
	t.Run("a request's tail block is evicted before its prefix", func(t *testing.T) {
		m := newTestManager(t, Config{NumBlocks: 5, BlockSize: 4})
		p := seqTokens(0, 13) // blocks 0..2 full and cached, block 3 partial
		admit(t, m, "a", p, "")
		m.Free("a")
		admit(t, m, "b", seqTokens(500, 8), "") // 2 blocks: the partial one, then a's last full one
		if _, n := m.GetComputedBlocks(p, ""); n != 8 {
			t.Fatalf("hit %d tokens, want the first two blocks (8)", n)
		}
	})
}

// weakHash collides a lot: it ignores the parent hash and the extra key and only sums tokens.
func weakHash(parent BlockHash, tokens []int32, extra string) BlockHash {
	var h BlockHash
	s := 0
	for _, t := range tokens {
		s += int(t)
	}
	h[0] = byte(s)
	return h
}

func TestPrefixHashCollisionIsMiss(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 64, BlockSize: 4, Hash: weakHash})
	a := []int32{1, 2, 3, 4, 5, 5, 5, 5, 9}
	admit(t, m, "a", a, "")
	cases := []struct {
		name   string
		tokens []int32
		salt   string
		want   int
	}{
		{"same prompt hits", a, "", 8},
		{"same sum, other tokens", []int32{4, 3, 2, 1, 5, 5, 5, 5, 9}, "", 0},
		{"other salt, same hash", a, "x", 0},
		{"second block's tokens first: parent differs", []int32{5, 5, 5, 5, 9}, "", 0},
		{"collision in the second block", []int32{1, 2, 3, 4, 6, 4, 5, 5, 9}, "", 4},
	}
	for _, tc := range cases {
		if _, n := m.GetComputedBlocks(tc.tokens, tc.salt); n != tc.want {
			t.Errorf("%s: hit %d tokens, want %d", tc.name, n, tc.want)
		}
	}
	// A colliding request computes its own blocks; the cache keeps the first owner.
	b := []int32{4, 3, 2, 1, 9}
	admit(t, m, "b", b, "")
	if _, n := m.GetComputedBlocks(a, ""); n != 8 {
		t.Errorf("after the colliding request: a hits %d, want 8", n)
	}
	if _, n := m.GetComputedBlocks(b, ""); n != 0 {
		t.Errorf("colliding request hits %d, want 0", n)
	}
	m.Free("a")
	m.Free("b")
	mustCheck(t, m)
}

func TestPrefixHashCycleStopsAtRepeatedBlock(t *testing.T) {
	// A hash that cycles back to the root hash lets the chain revisit a block; the lookup
	// must stop there instead of listing the block twice.
	cycling := func(parent BlockHash, _ []int32, _ string) BlockHash {
		if parent == (BlockHash{}) {
			return BlockHash{1}
		}
		return BlockHash{}
	}
	m := newTestManager(t, Config{NumBlocks: 64, BlockSize: 2, Hash: cycling})
	p := []int32{7, 7, 7, 7, 7, 7, 7}
	admit(t, m, "a", p, "")
	hits, n := m.GetComputedBlocks(p, "")
	if n != 4 || len(hits) != 2 || hits[0] == hits[1] {
		t.Fatalf("hit %d tokens in %v, want the first two blocks once each", n, hits)
	}
	if ok, err := m.Allocate("b", Alloc{NumComputed: n, NumNew: len(p) - n, Computed: hits}); !ok || err != nil {
		t.Fatalf("allocate: %v %v", ok, err)
	}
	mustCheck(t, m)
}

func TestResetPrefixCache(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 16, BlockSize: 4})
	p := seqTokens(0, 9)
	admit(t, m, "a", p, "")
	if m.ResetPrefixCache() {
		t.Fatal("reset while a request holds blocks")
	}
	m.Free("a")
	if !m.ResetPrefixCache() || m.NumCachedBlocks() != 0 {
		t.Fatalf("reset: %d cached blocks left", m.NumCachedBlocks())
	}
	mustCheck(t, m)
	if _, n := m.GetComputedBlocks(p, ""); n != 0 {
		t.Fatalf("hit %d after reset", n)
	}
}

// TestUncache: a request's blocks leave the prefix cache but stay held; blocks it shares
// with another request lose their entry too; the pool stays consistent and freeing works.
func TestUncache(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 16, BlockSize: 4})
	p := seqTokens(0, 9)
	admit(t, m, "a", p, "")
	hits, n := m.GetComputedBlocks(p, "")
	if n != 8 {
		t.Fatalf("hit %d tokens before Uncache, want 8", n)
	}
	if ok, err := m.Allocate("b", Alloc{NumComputed: n, NumNew: 1, Computed: hits}); !ok || err != nil {
		t.Fatalf("allocate b: %v %v", ok, err)
	}
	m.Uncache("a")
	mustCheck(t, m)
	if _, n := m.GetComputedBlocks(p, ""); n != 0 {
		t.Fatalf("hit %d tokens after Uncache, want 0", n)
	}
	if m.NumCachedBlocks() != 0 || len(m.BlockTable("a")) != 3 || len(m.BlockTable("b")) != 3 {
		t.Fatalf("after Uncache: %d cached blocks, tables %v and %v", m.NumCachedBlocks(), m.BlockTable("a"), m.BlockTable("b"))
	}
	m.Uncache("nobody")
	m.Free("a")
	m.Free("b")
	mustCheck(t, m)
	if m.NumFreeBlocks() != 15 {
		t.Fatalf("%d free blocks after freeing everything, want 15", m.NumFreeBlocks())
	}
}
