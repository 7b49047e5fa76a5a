package cuda

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// timeMedian runs fn reps times between timer events after one warm-up and returns the
// median milliseconds (inside Do).
func timeMedian(dv *Device, reps int, fn func() error) (float64, error) {
	tm, err := dv.NewTimer()
	if err != nil {
		return 0, err
	}
	defer dv.FreeTimer(tm)
	if err := fn(); err != nil {
		return 0, err
	}
	ms := make([]float64, reps)
	for i := range ms {
		if err := dv.Start(tm); err != nil {
			return 0, err
		}
		if err := fn(); err != nil {
			return 0, err
		}
		if ms[i], err = dv.Stop(tm); err != nil {
			return 0, err
		}
	}
	sort.Float64s(ms)
	return ms[reps/2], nil
}

// benchAll records the device's copy bandwidth, cuBLAS GEMM rates and the decode
// attention kernel's bandwidth.
func benchAll(t *testing.T, e *env, r *rand.Rand) {
	dv := e.dev
	// Copies: pinned host <-> device, and device to device (bytes read + written).
	const hostBytes = 256 << 20
	const devBytes = 2 << 30
	e.do(t, func() error {
		h, err := dv.AllocHost(hostBytes)
		if err != nil {
			return err
		}
		defer dv.FreeHost(h)
		hb := h.Bytes()
		for i := range hb {
			hb[i] = byte(i * 7)
		}
		d, err := dv.Alloc(I32, hostBytes/4)
		if err != nil {
			return err
		}
		defer dv.Free(d)
		up, err := timeMedian(dv, 5, func() error { return dv.UploadAsync(d, h, 0) })
		if err != nil {
			return err
		}
		down, err := timeMedian(dv, 5, func() error { return dv.DownloadAsync(h, 0, d) })
		if err != nil {
			return err
		}
		if err := dv.Sync(); err != nil {
			return err
		}
		for i := 0; i < len(hb); i += 4099 {
			if hb[i] != byte(i*7) {
				return fmt.Errorf("pinned round trip: byte %d = %d, want %d", i, hb[i], byte(i*7))
			}
		}
		result(t, "memcpy", "host->device pinned 256 MiB", fmt.Sprintf("%.1f GB/s", hostBytes/up/1e6), "cuMemcpyHtoDAsync_v2")
		result(t, "memcpy", "device->host pinned 256 MiB", fmt.Sprintf("%.1f GB/s", hostBytes/down/1e6), "cuMemcpyDtoHAsync_v2")

		a, err := dv.Alloc(I32, devBytes/4)
		if err != nil {
			return err
		}
		defer dv.Free(a)
		b, err := dv.Alloc(I32, devBytes/4)
		if err != nil {
			return err
		}
		defer dv.Free(b)
		if err := dv.Fill32(a, 0x3f800001); err != nil {
			return err
		}
		dd, err := timeMedian(dv, 10, func() error { return dv.CopyAsync(b, a) })
		if err != nil {
			return err
		}
		result(t, "memcpy", "device->device 2 GiB", fmt.Sprintf("%.0f GB/s", 2*devBytes/dd/1e6), "read+write bytes, cuMemcpyDtoDAsync_v2")
		return nil
	})

	// GEMMs on random BF16 data: a square compute-bound one and model-shaped ones.
	for _, s := range []struct{ n, k, m int }{{8192, 8192, 8192}, {1, 4096, 14336}, {64, 4096, 14336}, {512, 4096, 14336}} {
		x, _ := e.upload(t, BF16, randVals(r, s.n*s.k, 1))
		w, _ := e.upload(t, BF16, randVals(r, s.m*s.k, 1))
		y := e.poisoned(t, BF16, s.n*s.m)
		var ms float64
		e.do(t, func() error {
			var err error
			ms, err = timeMedian(dv, 10, func() error { return e.ops.MatMulT(y, x, w, s.n, s.k, s.m) })
			return err
		})
		flops := 2 * float64(s.n) * float64(s.k) * float64(s.m)
		bytes := 2 * float64(s.n*s.k+s.m*s.k+s.n*s.m)
		result(t, "gemm", fmt.Sprintf("bf16 n=%d k=%d m=%d", s.n, s.k, s.m), fmt.Sprintf("%.1f TFLOP/s", flops/ms/1e9),
			fmt.Sprintf("%.3f ms, %.0f GB/s", ms, bytes/ms/1e6))
	}

	// Decode attention: 64 sequences x 2048 context, 32 query / 8 kv heads of 128, BF16.
	const seqs, ctx, heads, kvHeads, hd, bs = 64, 2048, 32, 8, 128, 16
	maxBlocks := ctx / bs
	numBlocks := seqs * maxBlocks
	n := numBlocks * bs * kvHeads * hd
	k, _ := e.upload(t, BF16, randVals(r, n, 1))
	v, _ := e.upload(t, BF16, randVals(r, n, 1))
	cache := &KVCacheLayer{K: k, V: v, NumBlocks: numBlocks, BlockSize: bs, KVHeads: kvHeads, HeadDim: hd}
	q, _ := e.upload(t, F32, randVals(r, seqs*heads*hd, 1))
	out := e.poisoned(t, BF16, seqs*heads*hd)
	ctxs := make([]int32, seqs)
	for i := range ctxs {
		ctxs[i] = ctx
	}
	args := DecodeArgs{Out: out, OutStride: heads * hd, Q: q, QStride: heads * hd, Seqs: seqs, Heads: heads, Cache: cache,
		BlockTables: e.uploadI32(t, blockTables(r, seqs, maxBlocks, numBlocks)), MaxBlocks: maxBlocks,
		ContextLens: e.uploadI32(t, ctxs), MaxContext: ctx, Scale: 0.088}
	var ms float64
	e.do(t, func() error {
		w, err := dv.NewDecodeWorkspace(seqs, heads, 16, hd)
		if err != nil {
			return err
		}
		defer dv.FreeDecodeWorkspace(w)
		args.Work = w
		ms, err = timeMedian(dv, 10, func() error { return e.ops.AttentionDecode(args) })
		return err
	})
	kvBytes := float64(2 * seqs * ctx * kvHeads * hd * 2)
	result(t, "attention", "decode bf16 64 seqs x 2048 ctx, 32/8 heads", fmt.Sprintf("%.0f GB/s", kvBytes/ms/1e6),
		fmt.Sprintf("%.3f ms (KV bytes once; GQA heads re-read K/V)", ms))
	benchDecodeMany(t, e, r)
	benchPrefill(t, e, r)
}

// benchPrefill times AttentionPrefill on fresh prompts (BF16 cache, F32 out, 32 query / 8
// kv heads) with the tensor-core kernel and the scalar one.
func benchPrefill(t *testing.T, e *env, r *rand.Rand) {
	dv := e.dev
	for _, s := range []struct{ seqs, n, hd int }{{1, 512, 128}, {1, 512, 64}, {8, 2048, 128}} {
		const heads, kvHeads, bs = 32, 8, 16
		maxBlocks := (s.n + bs - 1) / bs
		numBlocks := s.seqs * maxBlocks
		cache, _, _ := pagedCache(t, e, r, BF16, numBlocks, bs, kvHeads, s.hd)
		total := s.seqs * s.n
		var starts, ctxs []int32
		for i := range s.seqs {
			starts = append(starts, int32(i*s.n))
			ctxs = append(ctxs, int32(s.n))
		}
		starts = append(starts, int32(total))
		q, _ := e.upload(t, F32, randVals(r, total*heads*s.hd, 1))
		out := e.poisoned(t, F32, total*heads*s.hd)
		args := PrefillArgs{Out: out, OutStride: heads * s.hd, Q: q, QStride: heads * s.hd, Tokens: total, Seqs: s.seqs,
			Heads: heads, Cache: cache, SeqStarts: e.uploadI32(t, starts), ContextLens: e.uploadI32(t, ctxs), MaxQueryLen: s.n,
			BlockTables: e.uploadI32(t, blockTables(r, s.seqs, maxBlocks, numBlocks)), MaxBlocks: maxBlocks, Scale: 0.088}
		flops := 4 * float64(s.hd) * heads * float64(s.seqs) * float64(s.n) * float64(s.n+1) / 2
		for _, scalar := range []bool{false, true} {
			args.scalar = scalar
			var ms float64
			e.do(t, func() error {
				var err error
				ms, err = timeMedian(dv, 10, func() error { return e.ops.AttentionPrefill(args) })
				return err
			})
			kind := "tensor cores"
			if scalar {
				kind = "scalar"
			}
			result(t, "attention", fmt.Sprintf("prefill bf16 %d x %d tokens, 32/8 heads of %d, %s", s.seqs, s.n, s.hd, kind),
				fmt.Sprintf("%.1f TFLOP/s", flops/ms/1e9), fmt.Sprintf("%.3f ms (causal FLOPs)", ms))
		}
	}
}
