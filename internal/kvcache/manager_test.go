package kvcache

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestNewManagerErrors(t *testing.T) {
	for _, cfg := range []Config{{NumBlocks: 1}, {NumBlocks: 0}, {NumBlocks: 10, BlockSize: -1}} {
		if _, err := NewManager(cfg); err == nil {
			t.Errorf("config %+v: no error", cfg)
		}
	}
	m := newTestManager(t, Config{NumBlocks: 10})
	if m.BlockSize() != DefaultBlockSize || m.NumBlocks() != 10 || m.NumFreeBlocks() != 9 || m.Usage() != 0 {
		t.Fatalf("fresh manager: block size %d, %d blocks, %d free, usage %v", m.BlockSize(), m.NumBlocks(), m.NumFreeBlocks(), m.Usage())
	}
	mustCheck(t, m)
}

func TestAllocateChunkedAndDecode(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 11, BlockSize: 4})
	steps := []struct{ computed, numNew, wantBlocks int }{
		{0, 3, 1}, {3, 1, 1}, {4, 5, 3}, {9, 0, 3}, {9, 3, 3}, {12, 1, 4},
	}
	for _, s := range steps {
		ok, err := m.Allocate("a", Alloc{NumComputed: s.computed, NumNew: s.numNew})
		if !ok || err != nil {
			t.Fatalf("step %+v: %v %v", s, ok, err)
		}
		mustCheck(t, m)
		if n := len(m.BlockTable("a")); n != s.wantBlocks {
			t.Fatalf("step %+v: %d blocks", s, n)
		}
	}
	if u := m.Usage(); u != 0.4 {
		t.Fatalf("usage %v, want 0.4", u)
	}
	if got := m.AppendBlockTable([]int32{-1}, "a"); len(got) != 5 || got[0] != -1 {
		t.Fatalf("AppendBlockTable: %v", got)
	}
	if m.BlockTable("nobody") != nil {
		t.Fatal("unknown request has a table")
	}
}

func TestCopyOnWrite(t *testing.T) {
	t.Run("shared partial block is copied by the first writer", func(t *testing.T) {
		m := newTestManager(t, Config{NumBlocks: 16, BlockSize: 4})
		prompt := seqTokens(0, 6) // one full block, one holding 2 tokens
		admit(t, m, "p", prompt, "")
		if err := m.Fork("p", "c"); err != nil {
			t.Fatal(err)
		}
		mustCheck(t, m)
		shared := m.BlockTable("p")
		if !slices.Equal(shared, m.BlockTable("c")) {
			t.Fatal("fork: tables differ")
		}
		if ok, err := m.Allocate("p", Alloc{NumComputed: 6, NumNew: 1}); !ok || err != nil {
			t.Fatalf("allocate: %v %v", ok, err)
		}
		mustCheck(t, m)
		tp := m.BlockTable("p")
		ops := m.TakeCopies()
		if len(ops) != 1 || ops[0].Src != shared[1] || ops[0].Dst != tp[1] || tp[1] == shared[1] {
			t.Fatalf("copies %v, parent table %v, shared %v", ops, tp, shared)
		}
		if tp[0] != shared[0] {
			t.Fatalf("the full block must stay shared: %v vs %v", tp, shared)
		}
		// The child is now the only holder of the old block: it writes in place.
		if ok, err := m.Allocate("c", Alloc{NumComputed: 6, NumNew: 1}); !ok || err != nil {
			t.Fatalf("allocate child: %v %v", ok, err)
		}
		if ops := m.TakeCopies(); len(ops) != 0 {
			t.Fatalf("second writer got copies %v", ops)
		}
		if tc := m.BlockTable("c"); !slices.Equal(tc, shared) {
			t.Fatalf("child table %v, want %v", tc, shared)
		}
		mustCheck(t, m)
	})
	t.Run("shared empty lookahead block is replaced without a copy", func(t *testing.T) {
		m := newTestManager(t, Config{NumBlocks: 16, BlockSize: 4})
		if ok, _ := m.Allocate("p", Alloc{NumNew: 12}); !ok {
			t.Fatal("allocate")
		}
		if err := m.Fork("p", "c"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := m.Allocate("p", Alloc{NumComputed: 8, NumNew: 2}); !ok {
			t.Fatal("allocate after fork")
		}
		mustCheck(t, m)
		tp, tc := m.BlockTable("p"), m.BlockTable("c")
		if ops := m.TakeCopies(); len(ops) != 0 {
			t.Fatalf("copies %v for a block with no valid tokens", ops)
		}
		if tp[2] == tc[2] || tp[0] != tc[0] || tp[1] != tc[1] {
			t.Fatalf("tables %v %v", tp, tc)
		}
	})
	t.Run("a copy into a freed block is dropped", func(t *testing.T) {
		m := newTestManager(t, Config{NumBlocks: 16, BlockSize: 4})
		admit(t, m, "p", seqTokens(0, 6), "")
		if err := m.Fork("p", "c"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := m.Allocate("c", Alloc{NumComputed: 6, NumNew: 1}); !ok {
			t.Fatal("allocate")
		}
		m.Free("c") // preempted in the same step
		mustCheck(t, m)
		if ops := m.TakeCopies(); len(ops) != 0 {
			t.Fatalf("copies %v into a freed block", ops)
		}
	})
	t.Run("rewriting a cached block held alone takes it out of the cache", func(t *testing.T) {
		m := newTestManager(t, Config{NumBlocks: 16, BlockSize: 4})
		p := seqTokens(0, 9)
		admit(t, m, "a", p, "")
		if err := m.Truncate("a", 6); err != nil {
			t.Fatal(err)
		}
		if _, n := m.GetComputedBlocks(p, ""); n != 8 {
			t.Fatalf("after truncate (no write yet): hit %d, want 8", n)
		}
		if ok, _ := m.Allocate("a", Alloc{NumComputed: 6, NumNew: 1}); !ok {
			t.Fatal("allocate")
		}
		mustCheck(t, m)
		if _, n := m.GetComputedBlocks(p, ""); n != 4 {
			t.Fatalf("after rewriting block 1: hit %d, want 4", n)
		}
		if ops := m.TakeCopies(); len(ops) != 0 {
			t.Fatalf("copies %v for a block held alone", ops)
		}
	})
	t.Run("rewriting a cached block another request holds copies it", func(t *testing.T) {
		m := newTestManager(t, Config{NumBlocks: 16, BlockSize: 4})
		p := seqTokens(0, 9)
		admit(t, m, "a", p, "")
		admit(t, m, "b", p, "") // shares blocks 0 and 1
		if err := m.Truncate("a", 6); err != nil {
			t.Fatal(err)
		}
		before := m.BlockTable("b")
		if ok, _ := m.Allocate("a", Alloc{NumComputed: 6, NumNew: 1}); !ok {
			t.Fatal("allocate")
		}
		mustCheck(t, m)
		ops := m.TakeCopies()
		ta := m.BlockTable("a")
		if len(ops) != 1 || ops[0].Src != before[1] || ops[0].Dst != ta[1] {
			t.Fatalf("copies %v, a %v, b %v", ops, ta, before)
		}
		if _, n := m.GetComputedBlocks(p, ""); n != 8 {
			t.Fatalf("b's blocks must stay cached: hit %d", n)
		}
	})
}

func TestAllocateFailureLeavesStateUnchanged(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 9, BlockSize: 4})
	shared := seqTokens(0, 9)
	admit(t, m, "a", shared, "") // 3 blocks, 2 cached
	m.Free("a")                  // all free; 2 cached in the LRU
	admit(t, m, "p", seqTokens(50, 6), "")
	if err := m.Fork("p", "c"); err != nil {
		t.Fatal(err)
	}
	// 8 usable: p holds 2 (shared with c), 6 free of which 2 cached.
	mustCheck(t, m)

	cases := []struct {
		name string
		id   RequestID
		a    func() Alloc
	}{
		{"new request, hits on free blocks count against the pool", "n", func() Alloc {
			hits, n := m.GetComputedBlocks(shared, "")
			return Alloc{NumComputed: n, NumNew: 4*4 + 1, Computed: hits} // 2 hits + 5 fresh = 7 > 6
		}},
		{"new request without hits", "n", func() Alloc { return Alloc{NumNew: 7 * 4} }},
		{"copy-on-write plus fresh blocks", "p", func() Alloc { return Alloc{NumComputed: 6, NumNew: 2 + 6*4} }}, // 1 copy + 6 fresh
	}
	for _, tc := range cases {
		a := tc.a()
		before := takeSnapshot(m)
		ok, err := m.Allocate(tc.id, a)
		if ok || err != nil {
			t.Fatalf("%s: ok %v, err %v; want plain failure", tc.name, ok, err)
		}
		assertUnchanged(t, before, m)
		mustCheck(t, m)
	}
	// One block less fits exactly.
	if ok, err := m.Allocate("p", Alloc{NumComputed: 6, NumNew: 2 + 5*4}); !ok || err != nil {
		t.Fatalf("exact fit: %v %v", ok, err)
	}
	mustCheck(t, m)
	if m.NumFreeBlocks() != 0 || m.Usage() != 1 {
		t.Fatalf("exact fit: %d free, usage %v", m.NumFreeBlocks(), m.Usage())
	}
}

func TestAllocateErrors(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 6, BlockSize: 4})
	p := seqTokens(0, 9)
	admit(t, m, "a", p, "")
	m.Free("a")
	hits, n := m.GetComputedBlocks(p, "")
	admit(t, m, "b", seqTokens(100, 20), "") // needs all 5 blocks: evicts the hits
	m.Free("b")

	type errCase struct {
		name string
		id   RequestID
		a    Alloc
	}
	run := func(cases []errCase) {
		t.Helper()
		for _, tc := range cases {
			before := takeSnapshot(m)
			ok, err := m.Allocate(tc.id, tc.a)
			if ok || err == nil {
				t.Errorf("%s: ok %v, err %v; want an error", tc.name, ok, err)
			} else if !strings.Contains(err.Error(), string(tc.id)) {
				t.Errorf("%s: error %q does not name the request", tc.name, err)
			}
			assertUnchanged(t, before, m)
		}
	}
	run([]errCase{
		{"negative new", "x", Alloc{NumNew: -1}},
		{"negative computed", "x", Alloc{NumComputed: -4}},
		{"computed without hits", "x", Alloc{NumComputed: 4, NumNew: 1}},
		{"stale hits", "x", Alloc{NumComputed: n, NumNew: 1, Computed: hits}},
		{"null block as hit", "x", Alloc{NumComputed: 4, NumNew: 1, Computed: []BlockID{0}}},
		{"out of range hit", "x", Alloc{NumComputed: 4, NumNew: 1, Computed: []BlockID{99}}},
	})
	for _, huge := range []Alloc{{NumNew: math.MaxInt}, {NumNew: math.MaxInt - 3}} {
		before := takeSnapshot(m)
		if ok, err := m.Allocate("x", huge); ok || err != nil {
			t.Errorf("allocate %d tokens: ok %v, err %v; want a plain failure", huge.NumNew, ok, err)
		}
		assertUnchanged(t, before, m)
	}
	admit(t, m, "c", p, "")
	tc := m.BlockTable("c")
	run([]errCase{
		{"duplicate hit", "x", Alloc{NumComputed: 8, NumNew: 1, Computed: []BlockID{tc[0], tc[0]}}},
		{"hits out of chain order", "x", Alloc{NumComputed: 8, NumNew: 1, Computed: []BlockID{tc[1], tc[0]}}},
		{"hits under another salt", "x", Alloc{NumComputed: 4, NumNew: 1, Computed: []BlockID{tc[0]}, Salt: "s"}},
		{"hits for an existing request", "c", Alloc{NumComputed: 4, NumNew: 1, Computed: []BlockID{tc[0]}}},
		{"computed beyond slots", "c", Alloc{NumComputed: 13, NumNew: 1}},
	})
	if err := m.CacheFullBlocks("nobody", p, 4); err == nil {
		t.Error("CacheFullBlocks of an unknown request: no error")
	}
	if err := m.CacheFullBlocks("c", p[:3], 4); err == nil {
		t.Error("CacheFullBlocks with more computed than tokens: no error")
	}
	if err := m.Truncate("nobody", 0); err == nil {
		t.Error("Truncate of an unknown request: no error")
	}
	if err := m.Truncate("c", -1); err == nil {
		t.Error("Truncate to a negative length: no error")
	}
	if err := m.Fork("nobody", "x"); err == nil {
		t.Error("Fork of an unknown parent: no error")
	}
	if err := m.Fork("c", "c"); err == nil {
		t.Error("Fork onto an existing child: no error")
	}
	m.Free("nobody") // no-op
	mustCheck(t, m)
}

func TestTruncateFreesTailBlocks(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 16, BlockSize: 4})
	if ok, _ := m.Allocate("a", Alloc{NumNew: 14}); !ok {
		t.Fatal("allocate")
	}
	for _, tc := range []struct{ tokens, blocks int }{{14, 4}, {13, 4}, {12, 3}, {9, 3}, {4, 1}, {0, 0}} {
		if err := m.Truncate("a", tc.tokens); err != nil {
			t.Fatal(err)
		}
		mustCheck(t, m)
		if n := len(m.BlockTable("a")); n != tc.blocks {
			t.Fatalf("truncate to %d: %d blocks, want %d", tc.tokens, n, tc.blocks)
		}
		if m.NumFreeBlocks() != 15-tc.blocks {
			t.Fatalf("truncate to %d: %d free", tc.tokens, m.NumFreeBlocks())
		}
	}
}

func TestCheckDetectsCorruption(t *testing.T) {
	corruptions := map[string]func(m *Manager){
		"ref count too high": func(m *Manager) { m.pool.blocks[m.seqs["a"].table[0]].ref++ },
		"block twice in a table": func(m *Manager) {
			s := m.seqs["a"]
			s.table[1] = s.table[0]
		},
		"leaked block": func(m *Manager) {
			s := m.seqs["a"]
			s.table = s.table[:len(s.table)-1]
		},
		"hash map points elsewhere": func(m *Manager) {
			for h := range m.pool.cached {
				m.pool.cached[h] = &m.pool.blocks[m.seqs["b"].table[2]]
			}
		},
		"null block in a table": func(m *Manager) { m.seqs["a"].table[0] = NullBlock },
		"free queue length":     func(m *Manager) { m.pool.free.n++ },
		"free block with references": func(m *Manager) {
			b := m.pool.free.front()
			b.ref = 1
		},
		"pending copy into a free block": func(m *Manager) {
			m.pending = append(m.pending, CopyOp{Src: 1, Dst: m.pool.free.front().id})
		},
	}
	for name, corrupt := range corruptions {
		m := newTestManager(t, Config{NumBlocks: 16, BlockSize: 4})
		admit(t, m, "a", seqTokens(0, 9), "")
		admit(t, m, "b", seqTokens(50, 9), "")
		corrupt(m)
		if err := m.Check(); err == nil {
			t.Errorf("%s: Check found nothing", name)
		}
	}
}

func TestExportImport(t *testing.T) {
	src := newTestManager(t, Config{NumBlocks: 32, BlockSize: 4})
	dst := newTestManager(t, Config{NumBlocks: 32, BlockSize: 4})
	prompt := seqTokens(0, 18)
	admit(t, src, "r", prompt, "s")
	ex, err := src.ExportBlocks("r")
	if err != nil {
		t.Fatal(err)
	}
	if ex.BlockSize != 4 || len(ex.Table) != 5 || len(ex.Hashes) != 4 || ex.Salt != "s" {
		t.Fatalf("export %+v", ex)
	}
	// The receiver already caches the first two blocks of the prompt.
	admit(t, dst, "warm", prompt[:9], "s")
	dst.Free("warm")
	im, ok, err := dst.ImportBlocks("r", prompt, "s")
	if !ok || err != nil {
		t.Fatalf("import: %v %v", ok, err)
	}
	if im.NumCachedTokens != 8 || len(im.Table) != 5 {
		t.Fatalf("import %+v", im)
	}
	if err := dst.CacheFullBlocks("r", prompt, len(prompt)); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, dst)
	if _, n := dst.GetComputedBlocks(append(slices.Clone(prompt), 1), "s"); n != 16 {
		t.Fatalf("after import: hit %d, want 16", n)
	}
	// Every full block, the last one included, may hit on import.
	im2, ok, err := dst.ImportBlocks("r2", prompt[:16], "s")
	if !ok || err != nil || im2.NumCachedTokens != 16 {
		t.Fatalf("second import: %+v %v %v", im2, ok, err)
	}
	if _, _, err := dst.ImportBlocks("r", prompt, "s"); err == nil {
		t.Fatal("importing an existing request: no error")
	}
	if _, err := src.ExportBlocks("nobody"); err == nil {
		t.Fatal("exporting an unknown request: no error")
	}
	mustCheck(t, dst)
}

func TestPinPrefix(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 16, BlockSize: 4})
	prompt := seqTokens(0, 10)
	admit(t, m, "r", prompt, "s")
	want, err := m.ExportBlocks("r")
	if err != nil {
		t.Fatal(err)
	}
	m.Free("r")
	if m.Usage() != 0 {
		t.Fatalf("usage %v after free", m.Usage())
	}
	pin, err := m.PinPrefix("pin", prompt, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(pin.Table) != 2 || !slices.Equal(pin.Table, want.Table[:2]) || !slices.Equal(pin.Hashes, want.Hashes[:2]) {
		t.Fatalf("pin %+v, want the first two blocks of %+v", pin, want)
	}
	// Pinned blocks survive a request that takes every free block.
	admit(t, m, "big", seqTokens(100, 4*13), "")
	if _, n := m.GetComputedBlocks(append(slices.Clone(prompt[:8]), 1), "s"); n != 8 {
		t.Fatalf("pinned prefix: hit %d tokens, want 8", n)
	}
	m.Free("big")
	m.Free("pin")
	mustCheck(t, m)
	if m.Usage() != 0 {
		t.Fatalf("usage %v after unpin", m.Usage())
	}
	none, err := m.PinPrefix("p2", seqTokens(500, 8), "s")
	if err != nil || len(none.Table) != 0 || m.HasRequest("p2") {
		t.Fatalf("pin of an uncached prompt: %+v %v (request made: %v)", none, err, m.HasRequest("p2"))
	}
	if _, err := m.PinPrefix("pin2", prompt, "other salt"); err != nil {
		t.Fatal(err)
	}
}
