package kvasir

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestHugeMaxModelLen: a MaxModelLen of 2^62 does not wrap the default KV budget (what
// MaxNumSeqs sequences of MaxModelLen tokens need, capped at DefaultKVCacheMemory) into a
// negative one; the cache gets the whole default budget and the context is capped by it.
func TestHugeMaxModelLen(t *testing.T) {
	p := testdata.Path(t, "models/stories260K/stories260K.bin")
	tok := testdata.Path(t, "models/stories260K/tok512.bin")
	for _, seqs := range []int{0, 1 << 40} {
		e, err := Open(p, Options{Tokenizer: tok, Threads: 1, MaxModelLen: 1 << 62, MaxNumSeqs: seqs})
		if err != nil {
			t.Fatalf("max num seqs %d: %v", seqs, err)
		}
		// stories260K: 2 x 5 layers x 4 kv heads x 8 dims x 4 bytes = 1280 bytes a token;
		// 1 GiB holds 52428 blocks of 16 tokens, one of them the null block.
		if got, want := e.MaxModelLen(), (52428-1)*16; got != want || e.sizing.MemoryBytes != 1<<30 {
			t.Errorf("max num seqs %d: max model len %d from a budget of %d bytes, want %d from 1 GiB", seqs, got, e.sizing.MemoryBytes, want)
		}
		e.Close()
	}
}
