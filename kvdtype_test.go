package kvasir

import (
	"context"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// TestOpenQuantizedCache: int8 and FP8 caches hold the blocks their layout says in the
// same memory (stories260K's 8-element head vectors: 8 code bytes and one 4-byte scale,
// 12 bytes against f16's 16, so 4/3 the blocks), move blocks of that many bytes, and tell a
// greedy story; the CLI names read as the types.
func TestOpenQuantizedCache(t *testing.T) {
	p := testdata.Path(t, "models/stories260K/stories260K.bin")
	tok := testdata.Path(t, "models/stories260K/tok512.bin")
	const mem = 4 << 20
	for _, name := range []string{"f16", "int8", "q8_0", "fp8", "fp8_e5m2"} {
		dt, err := ParseKVCacheDType(name)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Open(p, Options{Tokenizer: tok, Threads: 2, KVCacheMemory: mem, KVCacheDType: dt})
		if err != nil {
			t.Fatal(err)
		}
		c := e.l.fm.Config
		row := 2 * c.HeadDim // f16
		if name != "f16" {
			row = c.HeadDim + 4
		}
		perBlock := 2 * c.Layers * c.KVHeads * row * e.BlockSize()
		if got, want := e.BlockBytes(), perBlock; got != want {
			t.Errorf("%s: blocks of %d bytes, want %d", name, got, want)
		}
		if got, want := e.sizing.NumBlocks, mem/perBlock; got != want {
			t.Errorf("%s: %d blocks in %d bytes, want %d", name, got, mem, want)
		}
		ch, err := e.Generate(context.Background(), Request{Prompt: "Once upon a time", Params: SamplingParams{MaxTokens: 40}})
		if err != nil {
			t.Fatal(err)
		}
		var text string
		for o := range ch {
			text += o.Text
		}
		t.Logf("%s (%s): %s; %q", name, e.KVCacheDType(), e.KVCacheSizing(), text)
		if len(text) < 40 {
			t.Errorf("%s cache: story %q", name, text)
		}
		e.Close()
	}
}

// TestKVNamespaceNamesQuantizedType: instances sharing a KV pool agree on its namespace
// only with the same cache type: int8 and fp8 blocks are of one size, so the namespace must
// tell them apart (and f16 stays told apart by its block size and element bytes).
func TestKVNamespaceNamesQuantizedType(t *testing.T) {
	p := testdata.Path(t, "models/stories260K/stories260K.bin")
	tok := testdata.Path(t, "models/stories260K/tok512.bin")
	namespace := func(dt KVCacheDType) string {
		fm, err := format.Open(p, format.Options{Tokenizer: tok})
		if err != nil {
			t.Fatal(err)
		}
		l, err := Load(fm, Options{Threads: 1, KVCacheDType: dt})
		if err != nil {
			fm.Close()
			t.Fatal(err)
		}
		defer l.Close()
		return kvNamespace(l, 16, int(16*l.m.KVBytesPerToken()))
	}
	seen := map[string]KVCacheDType{}
	for _, dt := range []KVCacheDType{KVCacheF32, KVCacheF16, KVCacheInt8, KVCacheFP8E4M3, KVCacheFP8E5M2} {
		ns := namespace(dt)
		if other, ok := seen[ns]; ok {
			t.Errorf("%s and %s caches share the namespace %s", dt, other, ns)
		}
		seen[ns] = dt
		if again := namespace(dt); again != ns {
			t.Errorf("%s: two loads give the namespaces %s and %s", dt, ns, again)
		}
	}
}
