package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMLAShapes checks the host side of attn_mla without a device: the head groups a
// block takes, the split choice, and the cache checks (576-wide heads only for a float
// cache whose values are its keys, one buffer for both, the older kernels refusing them).
func TestMLAShapes(t *testing.T) {
	for group, want := range map[int]int{1: 1, 2: 2, 4: 4, 16: 16, 128: 16, 24: 8, 12: 4, 7: 1} {
		if got := mlaHeadGroup(group); got != want {
			t.Errorf("mlaHeadGroup(%d) = %d, want %d", group, got, want)
		}
	}
	k := Buffer{Ptr: 4096, DType: BF16, Len: 4 * 16 * 576}
	c := &KVCacheLayer{K: k, V: k, NumBlocks: 4, BlockSize: 16, KVHeads: 1, HeadDim: 576, ValuesAreKeys: true}
	if err := c.Check("test"); err != nil {
		t.Errorf("a 576-wide cache whose values are its keys: %v", err)
	}
	for name, err := range map[string]error{
		"decode":  c.checkTiled("attention decode"),
		"no flag": (&KVCacheLayer{K: k, V: k, NumBlocks: 4, BlockSize: 16, KVHeads: 1, HeadDim: 576}).Check("test"),
		"two buffers": (&KVCacheLayer{K: k, V: Buffer{Ptr: 1 << 20, DType: BF16, Len: k.Len}, NumBlocks: 4, BlockSize: 16, KVHeads: 1,
			HeadDim: 576, ValuesAreKeys: true}).Check("test"),
		"too wide": (&KVCacheLayer{K: k, V: k, NumBlocks: 2, BlockSize: 16, KVHeads: 1, HeadDim: 608, ValuesAreKeys: true}).Check("test"),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Decode of one sequence over 4096 positions with 16 heads: one block a split, so as
	// many splits as allowed; 64 sequences of 16 heads x 8 chunks of 2000-token prefill:
	// the blocks fill the device, one split.
	a := MLAArgs{Tokens: 1, Seqs: 1, Heads: 16, MaxQueryLen: 1, MaxContext: 4096, Cache: c}
	if n, l := MLASplits(a, 132, 32); n != 32 || l != 128 {
		t.Errorf("decode of one sequence: %d splits of %d, want 32 of 128", n, l)
	}
	if n, _ := MLASplits(a, 132, 0); n != 1 {
		t.Errorf("decode without a workspace: %d splits, want 1", n)
	}
	a = MLAArgs{Tokens: 64 * 2000, Seqs: 64, Heads: 16, MaxQueryLen: 2000, MaxContext: 2000, Cache: c}
	if n, _ := MLASplits(a, 132, 32); n != 1 {
		t.Errorf("prefill: %d splits, want 1", n)
	}
}

// mlaCase is one AttentionMLA check: sequences of the given query lengths and contexts.
type mlaCase struct {
	heads, hd int
	qlens     []int
	ctxs      []int
	dt, odt   DType
	splits    int
}

// testMLA checks AttentionMLA against the float64 reference (attnRef with the keys as the
// values) for one case on a cache of random keys, block tables that share physical blocks.
func testMLA(t *testing.T, e *env, r *rand.Rand, c mlaCase) {
	const bs = 16
	maxCtx, maxQ, tokens := 0, 0, 0
	for i := range c.ctxs {
		maxCtx, maxQ, tokens = max(maxCtx, c.ctxs[i]), max(maxQ, c.qlens[i]), tokens+c.qlens[i]
	}
	seqs := len(c.ctxs)
	maxBlocks := (maxCtx + bs - 1) / bs
	numBlocks := seqs*maxBlocks/2 + 2
	n := numBlocks * bs * c.hd
	k, kh := e.upload(t, c.dt, randVals(r, n, 1))
	cache := &KVCacheLayer{K: k, V: k, NumBlocks: numBlocks, BlockSize: bs, KVHeads: 1, HeadDim: c.hd, ValuesAreKeys: true}
	bt := blockTables(r, seqs, maxBlocks, numBlocks)
	qv := randVals(r, tokens*c.heads*c.hd, 2)
	qb, _ := e.upload(t, F32, qv)
	scale := float32(1 / math.Sqrt(192))
	starts := make([]int32, seqs+1)
	ctxs := make([]int32, seqs)
	want := make([]float64, 0, tokens*c.heads*c.hd)
	for s := range seqs {
		starts[s+1] = starts[s] + int32(c.qlens[s])
		ctxs[s] = int32(c.ctxs[s])
		for i := range c.qlens[s] {
			tok := int(starts[s]) + i
			for h := range c.heads {
				want = append(want, attnRef(qv[(tok*c.heads+h)*c.hd:][:c.hd], kh, kh, bt[s*maxBlocks:], c.ctxs[s]-c.qlens[s]+i+1,
					bs, 1, 0, c.hd, float64(scale))...)
			}
		}
	}
	var work *DecodeWorkspace
	e.do(t, func() error {
		var err error
		work, err = e.dev.NewDecodeWorkspace(tokens, c.heads, 32, c.hd)
		return err
	})
	defer e.do(t, func() error { return e.dev.FreeDecodeWorkspace(work) })
	out := e.poisoned(t, c.odt, tokens*c.heads*c.hd)
	args := MLAArgs{Out: out, OutStride: c.heads * c.hd, Q: qb, QStride: c.heads * c.hd, Tokens: tokens, Seqs: seqs, Heads: c.heads,
		Cache: cache, SeqStarts: e.uploadI32(t, starts), ContextLens: e.uploadI32(t, ctxs), MaxQueryLen: maxQ, MaxContext: maxCtx,
		BlockTables: e.uploadI32(t, bt), MaxBlocks: maxBlocks, Scale: scale, Work: work, Splits: c.splits}
	e.do(t, func() error { return e.ops.AttentionMLA(args) })
	tl := c.odt
	if c.dt != F32 && c.odt == F32 {
		tl = F16
	}
	splits, _ := MLASplits(args, e.dev.Info().Multiprocessors, 32)
	check(t, fmt.Sprintf("attn_mla heads=%d hd=%d seqs=%d tokens=%d maxCtx=%d cache=%s out=%s splits=%d (ran %d)",
		c.heads, c.hd, seqs, tokens, maxCtx, c.dt, c.odt, c.splits, splits), tl, e.download(t, out), want)
}

// TestGPUMLAAttention checks attn_mla (AttentionMLA) against the float64 reference on
// multi-head latent attention's shapes: heads of 576 (64 rotated + 512 latent) and 320
// whose values are the keys, 16 (V2-Lite), 128 (V2/V3) and fewer query heads over the one
// kv head (blocks of several tokens), decode of many sequences and of one long one
// (split-K merged by attn_combine), chunked prefill over cached prefixes, speculative
// verification's few tokens a sequence, every cache and output type, splits forced and
// chosen. It also times batch-1 decode at 4096 positions against its KV bytes. It skips
// without a GPU.
func TestGPUMLAAttention(t *testing.T) {
	e := newEnv(t)
	r := rand.New(rand.NewPCG(17, 576))
	for _, c := range []mlaCase{
		{heads: 16, hd: 576, qlens: []int{37, 5, 20}, ctxs: []int{37, 100, 300}, dt: F32, odt: F32},
		{heads: 16, hd: 576, qlens: []int{37, 5, 20}, ctxs: []int{37, 100, 300}, dt: BF16, odt: F32, splits: 3},
		{heads: 16, hd: 576, qlens: []int{64, 1}, ctxs: []int{64, 1}, dt: F16, odt: BF16},
		{heads: 16, hd: 576, qlens: []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, ctxs: []int{1, 17, 300, 1000, 64, 2000, 33, 5, 129}, dt: BF16, odt: F32},
		{heads: 16, hd: 576, qlens: []int{1}, ctxs: []int{4096}, dt: BF16, odt: F32},
		{heads: 16, hd: 576, qlens: []int{1}, ctxs: []int{4096}, dt: F32, odt: F32, splits: 1},
		{heads: 128, hd: 576, qlens: []int{1, 1, 1}, ctxs: []int{700, 3, 1500}, dt: BF16, odt: F32},
		{heads: 128, hd: 576, qlens: []int{5, 5, 3}, ctxs: []int{800, 40, 1200}, dt: BF16, odt: F32},
		{heads: 128, hd: 576, qlens: []int{17}, ctxs: []int{2000}, dt: F16, odt: F16, splits: 5},
		{heads: 4, hd: 576, qlens: []int{29, 3}, ctxs: []int{60, 3}, dt: F32, odt: F32},
		{heads: 24, hd: 320, qlens: []int{9, 1}, ctxs: []int{500, 77}, dt: BF16, odt: BF16},
	} {
		testMLA(t, e, r, c)
	}
	benchMLADecode(t, e, r)
}

// benchMLADecode times batch-1 decode over 4096 cached positions of V2-Lite's attention
// (16 heads of 576, BF16 cache), the KV bytes read once for all heads.
func benchMLADecode(t *testing.T, e *env, r *rand.Rand) {
	const heads, hd, bs, ctx = 16, 576, 16, 4096
	maxBlocks := ctx / bs
	k, _ := e.upload(t, BF16, randVals(r, maxBlocks*bs*hd, 1))
	cache := &KVCacheLayer{K: k, V: k, NumBlocks: maxBlocks, BlockSize: bs, KVHeads: 1, HeadDim: hd, ValuesAreKeys: true}
	q, _ := e.upload(t, F32, randVals(r, heads*hd, 1))
	out := e.poisoned(t, F32, heads*hd)
	bt := make([]int32, maxBlocks)
	for i := range bt {
		bt[i] = int32(i)
	}
	args := MLAArgs{Out: out, OutStride: heads * hd, Q: q, QStride: heads * hd, Tokens: 1, Seqs: 1, Heads: heads, Cache: cache,
		SeqStarts: e.uploadI32(t, []int32{0, 1}), ContextLens: e.uploadI32(t, []int32{ctx}), MaxQueryLen: 1, MaxContext: ctx,
		BlockTables: e.uploadI32(t, bt), MaxBlocks: maxBlocks, Scale: 0.07}
	var ms float64
	e.do(t, func() error {
		w, err := e.dev.NewDecodeWorkspace(1, heads, 32, hd)
		if err != nil {
			return err
		}
		defer e.dev.FreeDecodeWorkspace(w)
		args.Work = w
		ms, err = timeMedian(e.dev, 21, func() error { return e.ops.AttentionMLA(args) })
		return err
	})
	kvBytes := float64(ctx * hd * 2)
	result(t, "attention", "mla decode bf16 1 seq x 4096 ctx, 16 heads of 576 over 1 kv head", fmt.Sprintf("%.1f us", ms*1000),
		fmt.Sprintf("%.0f GB/s of KV", kvBytes/ms/1e6))
}
