package kvasir

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// openStoriesGGUF opens stories260K with a small KV cache.
func openStoriesGGUF(t *testing.T) *Engine {
	t.Helper()
	e, err := Open(testdata.Path(t, "models/stories260K/stories260K.gguf"), Options{Threads: 1, KVCacheMemory: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// greedyRun generates n greedy tokens for req on e and returns the text and usage.
func greedyRun(t *testing.T, e *Engine, req Request, n int) (string, Usage) {
	t.Helper()
	req.Params = SamplingParams{MaxTokens: n}
	ch, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var text string
	var last Output
	for o := range ch {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		text += o.Text
		last = o
	}
	return text, last.Usage
}

// TestKVImport moves a prompt's KV from one engine to another through the block I/O seam:
// pinned and read out on the first, imported by a request on the second, which then
// generates what the first does without computing the imported blocks; the same blocks
// zeroed change the output (the imported KV is what the second engine attends to), and
// blocks whose hashes do not match the prompt are ignored.
func TestKVImport(t *testing.T) {
	src, dst := openStoriesGGUF(t), openStoriesGGUF(t)
	prompt, err := src.TokenizePrompt("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := greedyRun(t, src, Request{PromptTokens: prompt}, 30)
	pin, err := src.PinPrefix(prompt, "")
	if err != nil {
		t.Fatal(err)
	}
	full := len(prompt) / src.BlockSize()
	if len(pin.Blocks) != full || len(pin.Hashes) != full {
		t.Fatalf("pinned %d blocks (%d hashes), want the prompt's %d full blocks", len(pin.Blocks), len(pin.Hashes), full)
	}
	bb := src.BlockBytes()
	data := make([]byte, len(pin.Blocks)*bb)
	if err := src.ReadBlocks(pin.Blocks, data); err != nil {
		t.Fatal(err)
	}
	src.Unpin(pin)
	if s := src.Stats(); s.UsedBlocks != 0 {
		t.Fatalf("%d blocks used after unpin", s.UsedBlocks)
	}

	got, usage := greedyRun(t, dst, Request{PromptTokens: prompt, ImportKV: &KVImport{Hashes: pin.Hashes, Data: data}}, 30)
	if got != want {
		t.Errorf("with imported KV: %q, want %q", got, want)
	}
	// All full blocks but a last one that ends the prompt are taken, not computed.
	if wantCached := min(full, (len(prompt)-1)/src.BlockSize()) * src.BlockSize(); usage.CachedPromptTokens != wantCached {
		t.Errorf("cached prompt tokens %d, want %d (the imported blocks)", usage.CachedPromptTokens, wantCached)
	}
	if s := dst.Stats(); s.UsedBlocks != 0 {
		t.Fatalf("%d blocks used on the receiver after the request", s.UsedBlocks)
	}

	// Zeroed KV under the right hashes: a fresh receiver attends to it.
	zero := openStoriesGGUF(t)
	bad, _ := greedyRun(t, zero, Request{PromptTokens: prompt, ImportKV: &KVImport{Hashes: pin.Hashes, Data: make([]byte, len(data))}}, 30)
	if bad == want {
		t.Errorf("zeroed imported KV gave the true output %q: the import was not used", bad)
	}
	// Hashes of another salt: nothing is imported, the prompt is computed.
	other := openStoriesGGUF(t)
	ok, usage := greedyRun(t, other, Request{PromptTokens: prompt, CacheSalt: "tenant", ImportKV: &KVImport{Hashes: pin.Hashes, Data: make([]byte, len(data))}}, 30)
	if ok != want || usage.CachedPromptTokens != 0 {
		t.Errorf("import under another salt: %q (cached %d), want %q computed", ok, usage.CachedPromptTokens, want)
	}
	if s := zero.Stats(); s.UsedBlocks != 0 {
		t.Fatalf("%d blocks used after the zeroed import", s.UsedBlocks)
	}
}

// TestKVImportGPU is TestKVImport between two engines on the GPU (skipped without one):
// blocks read out of one device cache (device -> pinned staging -> host) and written into
// another's give the same greedy tokens without the imported blocks being computed.
func TestKVImportGPU(t *testing.T) {
	src := gpuEngine(t)
	dst := gpuEngine(t)
	prompt := make([]int32, 70)
	for i := range prompt {
		prompt[i] = int32(3 + (i*37)%500)
	}
	greedyIDs := func(e *Engine, imp *KVImport) ([]int32, Usage) {
		ch, err := e.Generate(context.Background(), Request{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 24, IgnoreEOS: true}, ImportKV: imp})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int32
		var last Output
		for o := range ch {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			ids = append(ids, o.TokenIDs...)
			last = o
		}
		return ids, last.Usage
	}
	want, _ := greedyIDs(src, nil)
	pin, err := src.PinPrefix(prompt, "")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, len(pin.Blocks)*src.BlockBytes())
	if err := src.ReadBlocks(pin.Blocks, data); err != nil {
		t.Fatal(err)
	}
	src.Unpin(pin)
	got, usage := greedyIDs(dst, &KVImport{Hashes: pin.Hashes, Data: data})
	if !slices.Equal(got, want) {
		t.Errorf("with KV imported on the GPU: %v, want %v", got, want)
	}
	if wantCached := (len(prompt) - 1) / src.BlockSize() * src.BlockSize(); usage.CachedPromptTokens != wantCached {
		t.Errorf("cached prompt tokens %d, want %d", usage.CachedPromptTokens, wantCached)
	}
	if s := dst.Stats(); s.UsedBlocks != 0 {
		t.Errorf("%d blocks used on the receiver after the request", s.UsedBlocks)
	}
}

// TestKVImportAbort aborts requests admitted with imported KV, at once and after their
// first token, and checks that their blocks (the import's included) are freed; and that
// imported KV of the wrong size is ignored.
func TestKVImportAbort(t *testing.T) {
	e := openStoriesGGUF(t)
	prompt, err := e.TokenizePrompt("Tom had a red ball. He liked to throw the ball to his dog. The dog was happy and ran after the ball every day.")
	if err != nil {
		t.Fatal(err)
	}
	hashes := e.BlockHashes(prompt, "")
	data := make([]byte, len(hashes)*e.BlockBytes())
	for _, after := range []int{0, 1} {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := e.Generate(ctx, Request{PromptTokens: prompt, Params: SamplingParams{MaxTokens: 60}, ImportKV: &KVImport{Hashes: hashes, Data: data}})
		if err != nil {
			t.Fatal(err)
		}
		if after == 0 {
			cancel() // before its admission, most likely
		}
		n := 0
		for range ch {
			if n++; n >= after {
				cancel()
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for e.Stats().UsedBlocks != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("aborted after %d outputs: %d blocks still used", after, e.Stats().UsedBlocks)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	fresh := openStoriesGGUF(t)
	want, _ := greedyRun(t, fresh, Request{PromptTokens: prompt}, 20)
	short := openStoriesGGUF(t)
	got, usage := greedyRun(t, short, Request{PromptTokens: prompt, ImportKV: &KVImport{Hashes: hashes, Data: data[:len(data)-1]}}, 20)
	if got != want || usage.CachedPromptTokens != 0 {
		t.Errorf("imported KV one byte short: %q (cached %d), want %q computed", got, usage.CachedPromptTokens, want)
	}
}

// TestOnLayerKV: a request's OnLayerKV receives every full block of its prompt, each
// layer once, and the bytes equal that layer's part of the block the prefix cache holds
// after the request, also when a step budget smaller than a block splits blocks over
// steps; a second request finds the blocks cached and is told of none of them.
func TestOnLayerKV(t *testing.T) {
	for _, budget := range []int{0, 5} {
		e, err := Open(testdata.Path(t, "models/stories260K/stories260K.gguf"), Options{Threads: 1, KVCacheMemory: 4 << 20, MaxNumBatchedTokens: budget})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		prompt, err := e.TokenizePrompt("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day")
		if err != nil {
			t.Fatal(err)
		}
		checkOnLayerKV(t, e, prompt)
	}
}

// TestOnLayerKVGPU: on the GPU (the layers copied on a side stream while the next ones
// compute), a request's OnLayerKV receives every layer of every full block of its prompt
// once, with the bytes of that layer's part of the block the cache holds after the
// request.
func TestOnLayerKVGPU(t *testing.T) {
	e := gpuEngine(t)
	prompt := make([]int32, 90)
	for i := range prompt {
		prompt[i] = int32(3 + (i*41)%500)
	}
	checkOnLayerKV(t, e, prompt)
}

// checkOnLayerKV runs prompt on e with OnLayerKV and checks every (block, layer) report
// against the prompt's cached blocks afterwards, then that a second run of the prompt,
// cached, reports no block before the last one.
func checkOnLayerKV(t *testing.T, e *Engine, prompt []int32) {
	t.Helper()
	if !e.StreamsLayers() {
		t.Fatal("the engine does not stream layers")
	}
	bs, lb := e.BlockSize(), e.LayerBlockBytes()
	layers := e.BlockLayers()
	full := len(prompt) / bs
	var mu sync.Mutex
	got := map[[2]int][]byte{}
	var dup error
	collect := func(first, layer int, data []byte) {
		mu.Lock()
		defer mu.Unlock()
		for i := range len(data) / lb {
			k := [2]int{first + i, layer}
			if got[k] != nil {
				dup = fmt.Errorf("block %d layer %d reported twice", k[0], k[1])
			}
			got[k] = slices.Clone(data[i*lb:][:lb])
		}
	}
	greedyRun(t, e, Request{PromptTokens: prompt, OnLayerKV: collect}, 2)
	if dup != nil {
		t.Fatal(dup)
	}
	if len(got) != full*layers {
		t.Fatalf("%d (block, layer) reports, want %d blocks x %d layers", len(got), full, layers)
	}
	pin, err := e.PinPrefix(prompt, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(pin.Blocks) != full {
		t.Fatalf("%d blocks cached of %d", len(pin.Blocks), full)
	}
	whole := make([]byte, full*e.BlockBytes())
	if err := e.ReadBlocks(pin.Blocks, whole); err != nil {
		t.Fatal(err)
	}
	e.Unpin(pin)
	for k, data := range got {
		want := whole[k[0]*e.BlockBytes()+k[1]*lb:][:lb]
		if !bytes.Equal(data, want) {
			t.Fatalf("block %d layer %d: the reported bytes differ from the cached block's", k[0], k[1])
		}
	}
	var again []int
	greedyRun(t, e, Request{PromptTokens: prompt, OnLayerKV: func(first, _ int, _ []byte) {
		mu.Lock()
		again = append(again, first)
		mu.Unlock()
	}}, 2)
	for _, first := range again {
		if first < full-1 {
			t.Fatalf("a request whose prompt is cached was told of block %d, computed again", first)
		}
	}
}

// TestKVImportMLA is TestKVImport for multi-head latent attention at the released models'
// attention dims (deepseek-v2-lite-attn, CPU): a block carries the one 576-value vector a
// slot and layer the cache holds (its values are its keys: BlockBytes of one vector, not
// two), and a receiver given those blocks generates the sender's greedy tokens without
// computing them; zeroed blocks change the output.
func TestKVImportMLA(t *testing.T) {
	shape, err := synth.Lookup("deepseek-v2-lite-attn")
	if err != nil {
		t.Fatal(err)
	}
	fm, err := synth.Model(shape, quant.F32, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	open := func() *Engine {
		e, err := OpenModel(fm, Options{Threads: 1, KVCacheMemory: 16 << 20, MaxModelLen: 256})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	src, dst, zero := open(), open(), open()
	c := shape.Config
	if got, want := src.BlockBytes(), c.Layers*src.BlockSize()*(c.RopeDim+c.KVLoRARank)*4; got != want {
		t.Fatalf("BlockBytes %d, want %d (one vector a slot and layer)", got, want)
	}
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(3 + (i*89)%500)
	}
	want, _ := greedyRun(t, src, Request{PromptTokens: prompt}, 12)
	pin, err := src.PinPrefix(prompt, "")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, len(pin.Blocks)*src.BlockBytes())
	if err := src.ReadBlocks(pin.Blocks, data); err != nil {
		t.Fatal(err)
	}
	src.Unpin(pin)
	got, usage := greedyRun(t, dst, Request{PromptTokens: prompt, ImportKV: &KVImport{Hashes: pin.Hashes, Data: data}}, 12)
	if got != want || usage.CachedPromptTokens == 0 {
		t.Errorf("with imported KV: %q (cached %d prompt tokens), want %q from the imported blocks", got, usage.CachedPromptTokens, want)
	}
	if bad, _ := greedyRun(t, zero, Request{PromptTokens: prompt, ImportKV: &KVImport{Hashes: pin.Hashes, Data: make([]byte, len(data))}}, 12); bad == want {
		t.Errorf("zeroed imported KV gave the true output %q: the import was not used", bad)
	}
}
