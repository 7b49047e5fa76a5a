package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestGroupedSplits(t *testing.T) {
	for _, c := range []struct {
		seqs, kvHeads, maxCtx, sms, maxSplits int
		splits                                int
	}{
		{256, 8, 256, 132, 32, 1},    // offline decode: blocks fill the device, no split-K
		{256, 8, 131072, 132, 32, 1}, // graph stride bound, still many blocks
		{1, 8, 4096, 132, 32, 32},    // one long sequence: as many splits as allowed
		{1, 8, 100, 132, 32, 4},      // short context: one tile a split
		{1, 8, 20, 132, 32, 1},       // shorter than a tile: one split
		{64, 8, 2048, 132, 16, 2},    // 512 blocks want ~528: two splits
		{4, 2, 1000, 132, 64, 32},    // bounded by one-tile splits
		{16, 8, 4096, 132, 32, 5},    // 128 blocks want ~528: five splits
	} {
		n, l := groupedSplits(c.seqs, c.kvHeads, c.maxCtx, c.sms, c.maxSplits)
		if n != c.splits {
			t.Errorf("groupedSplits%+v = %d splits, want %d", c, n, c.splits)
		}
		if l%decodeTile != 0 || n*l < c.maxCtx || (n-1)*l >= c.maxCtx {
			t.Errorf("groupedSplits%+v: %d splits of %d do not tile %d positions exactly", c, n, l, c.maxCtx)
		}
	}
	for ctx := 1; ctx < 3000; ctx += 37 {
		for splits := 1; splits <= 40; splits += 3 {
			n, l := fitSplits(ctx, min(splits, ctx))
			if n < 1 || n > splits || l%decodeTile != 0 || n*l < ctx || (n-1)*l >= ctx {
				t.Fatalf("fitSplits(%d, %d) = %d x %d", ctx, splits, n, l)
			}
		}
	}
}

// testDecodeGrouped checks the grouped decode kernel against the float64 reference on the
// shapes of batched decoding: many sequences with short, varied contexts, block tables
// that share physical blocks (prefix-cache hits), groups of 1, 2 and 8 query heads per kv
// head, F16 output, and the legacy kernels on the same inputs.
func testDecodeGrouped(t *testing.T, e *env, r *rand.Rand) {
	const bs = 16
	for _, c := range []struct {
		seqs, heads, kvHeads, hd, maxCtx int
		dt, odt                          DType
	}{
		{96, 16, 2, 128, 300, BF16, BF16},
		{40, 8, 8, 64, 200, F16, F16},
		{33, 16, 2, 64, 260, F32, F32},
		{17, 8, 4, 128, 500, BF16, F16},
		{8, 8, 1, 128, 90, F16, BF16},
	} {
		maxBlocks := (c.maxCtx + bs - 1) / bs
		numBlocks := c.seqs*maxBlocks/2 + 1 // fewer blocks than table entries: shared blocks
		cache, kh, vh := pagedCache(t, e, r, c.dt, numBlocks, bs, c.kvHeads, c.hd)
		bt := blockTables(r, c.seqs, maxBlocks, numBlocks)
		ctxs := make([]int32, c.seqs)
		for i := range ctxs {
			ctxs[i] = int32(1 + r.IntN(c.maxCtx))
		}
		ctxs[0] = int32(c.maxCtx)
		qv := randVals(r, c.seqs*c.heads*c.hd, 2)
		qb, _ := e.upload(t, F32, qv)
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		want := make([]float64, 0, c.seqs*c.heads*c.hd)
		for s := range c.seqs {
			for h := range c.heads {
				want = append(want, attnRef(qv[(s*c.heads+h)*c.hd:][:c.hd], kh, vh, bt[s*maxBlocks:], int(ctxs[s]), bs, c.kvHeads,
					h/(c.heads/c.kvHeads), c.hd, float64(scale))...)
			}
		}
		var work *DecodeWorkspace
		e.do(t, func() error {
			var err error
			work, err = e.dev.NewDecodeWorkspace(c.seqs, c.heads, 32, c.hd)
			return err
		})
		btb, ctxb := e.uploadI32(t, bt), e.uploadI32(t, ctxs)
		for _, legacy := range []bool{false, true} {
			for _, splits := range []int{0, 1, 3} {
				out := e.poisoned(t, c.odt, c.seqs*c.heads*c.hd)
				args := DecodeArgs{Out: out, OutStride: c.heads * c.hd, Q: qb, QStride: c.heads * c.hd, Seqs: c.seqs, Heads: c.heads,
					Cache: cache, BlockTables: btb, MaxBlocks: maxBlocks, ContextLens: ctxb, MaxContext: c.maxCtx, Scale: scale,
					Work: work, Splits: splits, legacy: legacy}
				e.do(t, func() error { return e.ops.AttentionDecode(args) })
				tl := c.odt
				if c.dt != F32 && c.odt == F32 {
					tl = F16
				}
				check(t, fmt.Sprintf("decode grouped seqs=%d heads=%d/%d hd=%d cache=%s out=%s splits=%d legacy=%v",
					c.seqs, c.heads, c.kvHeads, c.hd, c.dt, c.odt, splits, legacy), tl, e.download(t, out), want)
			}
		}
		e.do(t, func() error { return e.dev.FreeDecodeWorkspace(work) })
	}
}

// benchDecodeMany times decode attention at the offline benchmark's shape (256 sequences,
// contexts of 128 to 256, 32 query / 8 kv heads of 128, BF16 cache and output), the
// grouped kernel against the legacy one, on fresh caches larger than the L2.
func benchDecodeMany(t *testing.T, e *env, r *rand.Rand) {
	const seqs, heads, kvHeads, hd, bs, maxCtx = 256, 32, 8, 128, 16, 256
	for _, hdim := range []int{hd, 64} {
		maxBlocks := maxCtx / bs
		numBlocks := seqs * maxBlocks
		cache, _, _ := pagedCache(t, e, r, BF16, numBlocks, bs, kvHeads, hdim)
		ctxs := make([]int32, seqs)
		var positions int
		for i := range ctxs {
			ctxs[i] = int32(128 + r.IntN(129))
			positions += int(ctxs[i])
		}
		q, _ := e.upload(t, F32, randVals(r, seqs*heads*hdim, 1))
		out := e.poisoned(t, BF16, seqs*heads*hdim)
		args := DecodeArgs{Out: out, OutStride: heads * hdim, Q: q, QStride: heads * hdim, Seqs: seqs, Heads: heads, Cache: cache,
			BlockTables: e.uploadI32(t, blockTables(r, seqs, maxBlocks, numBlocks)), MaxBlocks: maxBlocks,
			ContextLens: e.uploadI32(t, ctxs), MaxContext: maxCtx, Scale: 0.088}
		kvBytes := float64(2 * positions * kvHeads * hdim * 2)
		for _, legacy := range []bool{true, false} {
			var ms float64
			e.do(t, func() error {
				w, err := e.dev.NewDecodeWorkspace(seqs, heads, 32, hdim)
				if err != nil {
					return err
				}
				defer e.dev.FreeDecodeWorkspace(w)
				args.Work, args.legacy = w, legacy
				ms, err = timeMedian(e.dev, 21, func() error { return e.ops.AttentionDecode(args) })
				return err
			})
			name := "grouped tile kernel"
			if legacy {
				name = "legacy kernel"
			}
			result(t, "attention", fmt.Sprintf("decode bf16 256 seqs x 128-256 ctx (mean %d), 32/8 heads of %d, %s", positions/seqs, hdim, name),
				fmt.Sprintf("%.1f us", ms*1000), fmt.Sprintf("%.0f GB/s of KV", kvBytes/ms/1e6))
		}
	}
}
