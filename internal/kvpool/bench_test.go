package kvpool

import (
	"bytes"
	"context"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
	"github.com/kvasir-llm/kvasir/internal/redistest"
)

// BenchmarkLookup reads a 2,000-token prefix of 16-token blocks of a smollm2-135m shape
// (720 KiB each, f32) from a local Redis.
func BenchmarkLookup(b *testing.B) {
	srv := redistest.Start(b)
	const blocks, bb = 125, 720 << 10
	p, err := New(Config{URL: srv.URL(), Namespace: "bench", BlockBytes: bb, Log: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	toks := make([]int32, blocks*16)
	for i := range toks {
		toks[i] = int32(i)
	}
	refs := kvcache.BlockRefs(toks, kvcache.ChainHashes(toks, 16, ""), 16, 0, blocks)
	p.Save(refs, bytes.Repeat([]byte{7}, blocks*bb))
	if err := p.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(blocks * bb)
	for b.Loop() {
		if got := p.Lookup(context.Background(), refs); len(got) != blocks {
			b.Fatalf("%d blocks", len(got))
		}
	}
}
