package kvcache

import (
	"fmt"
	"testing"
)

// BenchmarkAllocateFree admits a 512-token prompt in one chunk (32 blocks), caches its
// blocks and frees it; every iteration uses a new prompt, so each one evicts.
func BenchmarkAllocateFree(b *testing.B) {
	for _, caching := range []bool{false, true} {
		b.Run(fmt.Sprintf("prefix-caching=%v", caching), func(b *testing.B) {
			m := newTestManager(b, Config{NumBlocks: 4096, DisablePrefixCaching: !caching})
			prompt := seqTokens(0, 512)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				prompt[0] = int32(i)
				if ok, err := m.Allocate("r", Alloc{NumNew: len(prompt)}); !ok || err != nil {
					b.Fatal(ok, err)
				}
				if err := m.CacheFullBlocks("r", prompt, len(prompt)); err != nil {
					b.Fatal(err)
				}
				m.Free("r")
			}
		})
	}
}

// BenchmarkPrefixLookup looks up a fully cached 2048-token prompt (127 block hashes and
// verifications per lookup).
func BenchmarkPrefixLookup(b *testing.B) {
	m := newTestManager(b, Config{NumBlocks: 4096})
	prompt := seqTokens(0, 2048)
	admit(b, m, "warm", prompt, "salt")
	m.Free("warm")
	b.ReportAllocs()
	b.SetBytes(int64(len(prompt)) * 4)
	for b.Loop() {
		if _, n := m.GetComputedBlocks(prompt, "salt"); n != 2032 {
			b.Fatalf("hit %d", n)
		}
	}
}

// BenchmarkDecodeStep runs decode steps of 64 requests: one new slot each, then caching.
func BenchmarkDecodeStep(b *testing.B) {
	m := newTestManager(b, Config{NumBlocks: 8192})
	const reqs = 64
	ids := make([]RequestID, reqs)
	toks := make([][]int32, reqs)
	for i := range ids {
		ids[i] = RequestID(fmt.Sprint(i))
		toks[i] = seqTokens(i*100000, 100)
		admit(b, m, ids[i], toks[i], "")
	}
	b.ReportAllocs()
	for b.Loop() {
		for i, id := range ids {
			n := len(toks[i])
			if ok, err := m.Allocate(id, Alloc{NumComputed: n - 1, NumNew: 1}); !ok || err != nil {
				b.Fatal(ok, err)
			}
			toks[i] = append(toks[i], int32(n))
			if err := m.CacheFullBlocks(id, toks[i], n); err != nil {
				b.Fatal(err)
			}
			if n > 1000 { // 64 x 63 blocks fit in the pool
				m.Free(id)
				toks[i] = toks[i][:1]
				if ok, err := m.Allocate(id, Alloc{NumNew: 1}); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		}
	}
}
