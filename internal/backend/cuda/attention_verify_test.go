package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestVerifyPlan: the verify kernel serves head sizes 64 and 128 with up to a block's
// rows of query heads per kv head, splits a kv head's queries into chunks of rows/group
// queries, takes the fewest rows a block while the grid fits 8 blocks a multiprocessor,
// and splits the context as the grouped decode kernel does for the same sequences, capped
// by what the workspace holds for the step's tokens.
func TestVerifyPlan(t *testing.T) {
	for _, c := range []struct {
		dt                 DType
		heads, kvHeads, hd int
		ok                 bool
	}{
		{BF16, 32, 8, 128, true}, // llama-3.1-8b
		{BF16, 32, 32, 64, true},
		{BF16, 32, 1, 128, true},
		{F32, 16, 1, 128, true},
		{F32, 32, 1, 128, false}, // 32 query heads a kv head: more than an f32 block's 16 rows
		{BF16, 64, 1, 128, false},
		{BF16, 8, 2, 96, false},
		{BF16, 12, 8, 64, false},
	} {
		if got := VerifyKernel(c.dt, c.heads, c.kvHeads, c.hd); got != c.ok {
			t.Errorf("VerifyKernel(%s, %d, %d, %d) = %v, want %v", c.dt, c.heads, c.kvHeads, c.hd, got, c.ok)
		}
	}
	for _, c := range []struct{ rows, group, maxQuery, chunks, per int }{
		{32, 4, 5, 1, 8}, {32, 4, 17, 3, 8}, {4, 4, 5, 5, 1}, {16, 4, 5, 2, 4}, {16, 1, 5, 1, 16}, {4, 2, 5, 3, 2}, {16, 16, 3, 3, 1},
	} {
		if n, per := verifyChunks(c.rows, c.group, c.maxQuery); n != c.chunks || per != c.per {
			t.Errorf("verifyChunks(%d, %d, %d) = %d, %d; want %d, %d", c.rows, c.group, c.maxQuery, n, per, c.chunks, c.per)
		}
	}
	for _, c := range []struct {
		dt                                     DType
		group, maxQuery, seqs, kvHeads, splits int
		rows                                   int
	}{
		{BF16, 4, 5, 1, 8, 16, 4},     // 8B at batch 1: 16 x 8 x 5 = 640 blocks, one query each
		{BF16, 4, 5, 4, 8, 16, 16},    // 2,560 blocks are too many; 16 rows: 1,024
		{BF16, 4, 5, 64, 8, 1, 16},    // 2,560, then 1,024
		{BF16, 4, 5, 256, 8, 1, 32},   // the most rows a block
		{BF16, 2, 3, 1, 16, 8, 4},     // two queries a block
		{BF16, 8, 3, 1, 2, 8, 16},     // the group sets the least
		{F32, 4, 17, 32, 4, 4, 16},    // f32 blocks stop at 16 rows
		{BF16, 32, 5, 1000, 1, 1, 32}, //
	} {
		if got := verifyBlockRows(c.dt, c.group, c.maxQuery, c.seqs, c.kvHeads, c.splits, 132); got != c.rows {
			t.Errorf("verifyBlockRows(%s, group %d, %d queries, %d seqs, %d kv heads, %d splits) = %d, want %d",
				c.dt, c.group, c.maxQuery, c.seqs, c.kvHeads, c.splits, got, c.rows)
		}
	}
	o := &Ops{Dev: &Device{info: DeviceInfo{Multiprocessors: 132}}}
	work := &DecodeWorkspace{Seqs: 64, Heads: 32, Splits: 32, HeadDim: 128}
	for _, c := range []struct{ seqs, q, maxCtx int }{{1, 5, 512}, {1, 17, 4096}, {4, 5, 8192}, {16, 9, 1000}, {1, 1, 100}} {
		a := VerifyArgs{Tokens: c.seqs * c.q, Seqs: c.seqs, Heads: 32, MaxQueryLen: c.q, MaxContext: c.maxCtx,
			Cache: &KVCacheLayer{KVHeads: 8, HeadDim: 128, BlockSize: 16}, Work: work}
		n, l := o.verifySplits(a)
		maxSplits := min(decodeMaxSplits, max(1, work.Splits*work.Seqs*work.Heads/(c.seqs*32)))
		wn, wl := groupedSplits(c.seqs, 8, c.maxCtx, 132, maxSplits)
		if n*c.seqs*c.q*32 > work.Splits*work.Seqs*work.Heads {
			t.Errorf("%+v: %d splits of %d tokens overflow the workspace", c, n, c.seqs*c.q)
		} else if c.seqs*c.q*32*wn <= work.Splits*work.Seqs*work.Heads && (n != wn || l != wl) {
			t.Errorf("%+v: %d splits of %d, decode would take %d of %d", c, n, l, wn, wl)
		}
		if l%decodeTile != 0 || n*l < c.maxCtx || (n-1)*l >= c.maxCtx {
			t.Errorf("%+v: %d splits of %d do not tile %d positions", c, n, l, c.maxCtx)
		}
	}
}

// testVerify checks AttentionVerify against the float64 reference for sequences of 1 to 17
// query tokens (a fresh 17-token prompt, prefix hits, a context past 1,000), groups of 1,
// 2, 4, 8 and 16 query heads per kv head, every cache type, F32 and 16-bit outputs, and
// split choices auto, 1 and 3; and, with forced splits, that each query's output is the
// grouped decode kernel's for that query alone, bit for bit.
func testVerify(t *testing.T, e *env, r *rand.Rand) {
	const bs = 16
	type seqSpec struct{ prefix, q int }
	specs := []seqSpec{{40, 5}, {300, 1}, {0, 17}, {995, 3}, {16, 2}}
	var starts, ctxs []int32
	total, maxQ, maxCtx := 0, 0, 0
	for _, s := range specs {
		starts = append(starts, int32(total))
		ctxs = append(ctxs, int32(s.prefix+s.q))
		total += s.q
		maxQ = max(maxQ, s.q)
		maxCtx = max(maxCtx, s.prefix+s.q)
	}
	starts = append(starts, int32(total))
	maxBlocks := (maxCtx + bs - 1) / bs
	for _, c := range []struct {
		heads, kvHeads, hd int
		dt, odt            DType
	}{
		{32, 8, 128, BF16, BF16},
		{16, 8, 128, F16, F32},
		{8, 2, 64, F32, F32},
		{8, 1, 64, BF16, F16},
		{4, 4, 128, BF16, F32},
		{16, 1, 128, F32, BF16},
	} {
		numBlocks := len(specs) * maxBlocks
		cache, kh, vh := pagedCache(t, e, r, c.dt, numBlocks, bs, c.kvHeads, c.hd)
		bt := blockTables(r, len(specs), maxBlocks, numBlocks)
		qStride := (c.heads + 2*c.kvHeads) * c.hd // q inside a fused QKV buffer
		qv := randVals(r, total*qStride, 2)
		qb, _ := e.upload(t, F32, qv)
		scale := float32(1 / math.Sqrt(float64(c.hd)))
		var want []float64
		// One decode "sequence" per query token: its context and its sequence's blocks.
		var tokCtx, tokTables []int32
		for si, s := range specs {
			for i := range s.q {
				tok := int(starts[si]) + i
				for h := range c.heads {
					want = append(want, attnRef(qv[tok*qStride+h*c.hd:][:c.hd], kh, vh, bt[si*maxBlocks:], s.prefix+i+1, bs,
						c.kvHeads, h/(c.heads/c.kvHeads), c.hd, float64(scale))...)
				}
				tokCtx = append(tokCtx, int32(s.prefix+i+1))
				tokTables = append(tokTables, bt[si*maxBlocks:(si+1)*maxBlocks]...)
			}
		}
		var work *DecodeWorkspace
		e.do(t, func() error {
			var err error
			work, err = e.dev.NewDecodeWorkspace(max(total, len(specs)*maxQ, 64), c.heads, 32, c.hd)
			return err
		})
		startsB, ctxB, btB := e.uploadI32(t, starts), e.uploadI32(t, ctxs), e.uploadI32(t, bt)
		tokCtxB, tokBtB := e.uploadI32(t, tokCtx), e.uploadI32(t, tokTables)
		group := c.heads / c.kvHeads
		for i, splits := range []int{0, 1, 3, 3} {
			// Rows a block: the plan's choice, the fewest, the most, and the most with 3 splits.
			rows := []int{0, verifyBlockRows(c.dt, group, 1, 1, 1, 1, 132), maxVerifyRows(c.dt), maxVerifyRows(c.dt)}[i]
			out := e.poisoned(t, c.odt, total*c.heads*c.hd)
			args := VerifyArgs{Out: out, OutStride: c.heads * c.hd, Q: qb, QStride: qStride, Tokens: total, Seqs: len(specs),
				Heads: c.heads, Cache: cache, SeqStarts: startsB, ContextLens: ctxB, MaxQueryLen: maxQ, BlockTables: btB,
				MaxBlocks: maxBlocks, MaxContext: maxCtx, Scale: scale, Work: work, Splits: splits, Rows: rows}
			e.do(t, func() error { return e.ops.AttentionVerify(args) })
			got := e.download(t, out)
			tl := c.odt
			if c.dt != F32 && c.odt == F32 {
				tl = F16 // inputs were rounded already; only accumulation differs
			}
			name := fmt.Sprintf("verify heads=%d/%d hd=%d cache=%s out=%s splits=%d rows=%d", c.heads, c.kvHeads, c.hd, c.dt, c.odt, splits, rows)
			check(t, name, tl, got, want)
			if splits == 0 || !groupedDecode(group, c.hd) {
				continue
			}
			dout := e.poisoned(t, c.odt, total*c.heads*c.hd)
			dargs := DecodeArgs{Out: dout, OutStride: c.heads * c.hd, Q: qb, QStride: qStride, Seqs: total, Heads: c.heads,
				Cache: cache, BlockTables: tokBtB, MaxBlocks: maxBlocks, ContextLens: tokCtxB, MaxContext: maxCtx,
				Scale: scale, Work: work, Splits: splits}
			e.do(t, func() error { return e.ops.AttentionDecode(dargs) })
			dgot := e.download(t, dout)
			same := 0
			for i := range got {
				if math.Float32bits(got[i]) == math.Float32bits(dgot[i]) {
					same++
				}
			}
			result(t, "kernel", name+" vs decode kernel", fmt.Sprintf("%d/%d", same, len(got)), "values bit-identical")
			if !slices.Equal(got, dgot) {
				t.Errorf("%s: %d of %d values differ from the decode kernel's for the same queries", name, len(got)-same, len(got))
			}
		}
		e.do(t, func() error { return e.dev.FreeDecodeWorkspace(work) })
	}
}

// benchVerify times attention at llama-3.1-8b's shape (32 query heads over 8 kv heads of
// 128, BF16 cache and output) for one sequence, a verify step of 1+4 and 1+16 queries
// against a decode step of one and against the prefill kernel verify steps ran before, at
// 512 and 4,096 positions.
func benchVerify(t *testing.T, e *env, r *rand.Rand) {
	const heads, kvHeads, hd, bs = 32, 8, 128, 16
	for _, ctx := range []int{512, 4096} {
		maxBlocks := ctx / bs
		cache, _, _ := pagedCache(t, e, r, BF16, maxBlocks, bs, kvHeads, hd)
		bt := e.uploadI32(t, blockTables(r, 1, maxBlocks, maxBlocks))
		q, _ := e.upload(t, F32, randVals(r, 17*heads*hd, 1))
		out := e.poisoned(t, BF16, 17*heads*hd)
		var work *DecodeWorkspace
		e.do(t, func() error {
			var err error
			work, err = e.dev.NewDecodeWorkspace(64, heads, 32, hd)
			return err
		})
		ctxB := e.uploadI32(t, []int32{int32(ctx)})
		var decodeMS float64
		e.do(t, func() error {
			a := DecodeArgs{Out: out, OutStride: heads * hd, Q: q, QStride: heads * hd, Seqs: 1, Heads: heads, Cache: cache,
				BlockTables: bt, MaxBlocks: maxBlocks, ContextLens: ctxB, MaxContext: ctx, Scale: 0.088, Work: work}
			var err error
			decodeMS, err = timeMedian(e.dev, 21, func() error { return e.ops.AttentionDecode(a) })
			return err
		})
		result(t, "attention", fmt.Sprintf("decode bf16 1 seq x 1 query, %d positions, 32/8 heads of 128", ctx),
			fmt.Sprintf("%.1f us", decodeMS*1000), "")
		for _, nq := range []int{5, 17} {
			starts := e.uploadI32(t, []int32{0, int32(nq)})
			var ms float64
			e.do(t, func() error {
				a := VerifyArgs{Out: out, OutStride: heads * hd, Q: q, QStride: heads * hd, Tokens: nq, Seqs: 1, Heads: heads,
					Cache: cache, SeqStarts: starts, ContextLens: ctxB, MaxQueryLen: nq, BlockTables: bt, MaxBlocks: maxBlocks,
					MaxContext: ctx, Scale: 0.088, Work: work}
				var err error
				ms, err = timeMedian(e.dev, 21, func() error { return e.ops.AttentionVerify(a) })
				return err
			})
			var prefillMS float64
			e.do(t, func() error {
				a := PrefillArgs{Out: out, OutStride: heads * hd, Q: q, QStride: heads * hd, Tokens: nq, Seqs: 1, Heads: heads,
					Cache: cache, SeqStarts: starts, ContextLens: ctxB, MaxQueryLen: nq, BlockTables: bt, MaxBlocks: maxBlocks,
					Scale: 0.088}
				var err error
				prefillMS, err = timeMedian(e.dev, 21, func() error { return e.ops.AttentionPrefill(a) })
				return err
			})
			result(t, "attention", fmt.Sprintf("verify bf16 1 seq x %d queries, %d positions, 32/8 heads of 128", nq, ctx),
				fmt.Sprintf("%.1f us", ms*1000), fmt.Sprintf("%.2fx the decode step; the prefill kernel (tensor cores) %.1f us", ms/decodeMS, prefillMS*1000))
		}
		e.do(t, func() error { return e.dev.FreeDecodeWorkspace(work) })
	}
}
