package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var floatTypes = []DType{F32, F16, BF16}

func TestOpenWithoutDriver(t *testing.T) {
	drv, err := Open()
	if err == nil {
		if _, cerr := drv.DeviceCount(); cerr != nil {
			t.Fatalf("driver opened but DeviceCount failed: %v", cerr)
		}
		t.Skip("a CUDA driver is present")
	}
	if !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Fatalf("error %q does not name libcuda.so.1", err)
	}
	if !strings.HasPrefix(err.Error(), "CUDA driver") && !strings.Contains(err.Error(), "cuInit") {
		t.Fatalf("error %q is not a clear driver error", err)
	}
}

func TestKernelSourceHasEveryKernel(t *testing.T) {
	src, err := KernelSource()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(src, "// ---- common.cu ----") {
		t.Fatalf("common.cu does not come first")
	}
	var names []string
	for _, dt := range floatTypes {
		s := dt.String()
		names = append(names, "embed_"+s, "rmsnorm_"+s, "swiglu_"+s, "rope_kv_"+s, "attn_decode_"+s, "attn_combine_"+s,
			"attn_decode_gqa2_"+s, "attn_decode_gqa4_"+s, "attn_decode_grp64g1_"+s, "attn_decode_grp64g8_"+s, "attn_decode_grp128g2_"+s, "attn_decode_grp128g4_"+s)
		for _, o := range floatTypes {
			names = append(names, "attn_prefill_"+s+"_"+o.String())
		}
		names = append(names, "attn_window_"+s)
		names = append(names, "attn_prefill_tc64_bf16_"+s, "attn_prefill_tc128_bf16_"+s, "attn_verify64r4_"+s, "attn_verify128r4_"+s, "attn_verify128r16_"+s)
	}
	for _, n := range []string{"n1", "n2", "n4", "n8"} {
		for _, dt := range []string{"bf16", "f16"} {
			names = append(names, "gemv_"+n+"_"+dt, "gemvm_"+n+"_"+dt, "gemvglu_"+n+"_"+dt)
		}
	}
	names = append(names, "gather_rows_f32", "cast_f32_f16", "cast_f32_bf16", "widen_f16_f32", "widen_bf16_f32",
		"rmsnorm_f32_sh_bf16", "rmsnorm_f32_sh_f16", "swiglu_sh_bf16", "swiglu_sh_f16", "add_f32", "argmax_f32", "sample_f32",
		"geglu_f32", "gelu_glu_f32", "bidir_attn_f32", "scale_f32", "sumsq_f32", "rmsnorm_split_f32", "lora_shrink_f32", "lora_expand_f32")
	for _, n := range names {
		if !strings.Contains(src, n+"(") && !strings.Contains(src, "("+n+",") {
			t.Errorf("kernel %s is not defined in the embedded sources", n)
		}
	}
}

func TestCubinKey(t *testing.T) {
	a := cubinKey("src", []string{"-O3"}, "sm_90", 13, 0)
	for _, b := range []string{
		cubinKey("src2", []string{"-O3"}, "sm_90", 13, 0),
		cubinKey("src", []string{"-O2"}, "sm_90", 13, 0),
		cubinKey("src", []string{"-O3"}, "sm_80", 13, 0),
		cubinKey("src", []string{"-O3"}, "sm_90", 12, 8),
	} {
		if a == b {
			t.Fatalf("different inputs share cubin key %s", a)
		}
	}
	if a != cubinKey("src", []string{"-O3"}, "sm_90", 13, 0) {
		t.Fatal("cubin key is not deterministic")
	}
}

func TestBufferSlice(t *testing.T) {
	b := Buffer{Ptr: 1000, DType: BF16, Len: 10}
	s, err := b.Slice(2, 5)
	if err != nil || s.Ptr != 1004 || s.Len != 3 || s.DType != BF16 {
		t.Fatalf("slice = %+v, %v", s, err)
	}
	for _, r := range [][2]int{{-1, 2}, {3, 2}, {0, 11}} {
		if _, err := b.Slice(r[0], r[1]); err == nil {
			t.Errorf("slice %v of 10 accepted", r)
		}
	}
}

// TestGPU runs every device check on one opened device; it skips without a GPU.
func TestGPU(t *testing.T) {
	e := newEnv(t)
	info := e.dev.Info()
	result(t, "device", info.Name, info.Arch(), fmt.Sprintf("%d SMs, %.1f GiB, driver %d", info.Multiprocessors, float64(info.TotalMem)/(1<<30), e.dev.Driver().Version))
	result(t, "nvrtc", "compile all kernels (cold)", fmt.Sprintf("%.3f s", e.compile.Seconds()), fmt.Sprintf("NVRTC %d.%d, cuBLAS %d", e.nv.Major, e.nv.Minor, e.ops.BLAS.Version))
	r := rand.New(rand.NewPCG(1, 2))

	t.Run("cubin cache", func(t *testing.T) { testCubinCache(t, e) })
	t.Run("do", func(t *testing.T) { testDo(t, e) })
	t.Run("embedding", func(t *testing.T) { testEmbedding(t, e, r) })
	t.Run("rmsnorm", func(t *testing.T) { testRMSNorm(t, e, r) })
	t.Run("elementwise", func(t *testing.T) { testElementwise(t, e, r) })
	t.Run("rope kv", func(t *testing.T) { testRopeKV(t, e, r) })
	t.Run("attention decode", func(t *testing.T) { testDecode(t, e, r); testDecodeGrouped(t, e, r) })
	t.Run("attention prefill", func(t *testing.T) { testPrefill(t, e, r) })
	t.Run("attention verify", func(t *testing.T) { testVerify(t, e, r); benchVerify(t, e, r) })
	t.Run("variants", func(t *testing.T) { testVariants(t, e, r) })
	t.Run("encoder", func(t *testing.T) { testEncoder(t, e, r) })
	t.Run("matmul", func(t *testing.T) { testMatMul(t, e, r) })
	t.Run("gemv", func(t *testing.T) { testGEMV(t, e, r); testGEMVRows(t, e, r); benchGEMV(t, e, r) })
	t.Run("gemvq", func(t *testing.T) {
		testGEMVQ(t, e, r)
		testGEMVQ8(t, e, r)
		testGEMVQMulti(t, e, r)
		testX8Copies(t, e, r)
		benchGEMVQ(t, e, r)
	})
	t.Run("argmax", func(t *testing.T) { testArgmax(t, e, r) })
	t.Run("sample", func(t *testing.T) { testSample(t, e, r) })
	t.Run("argmax masked", func(t *testing.T) { testArgmaxMasked(t, e) })
	t.Run("sample masked", func(t *testing.T) { testSampleMasked(t, e) })
	t.Run("graph", func(t *testing.T) { testGraph(t, e, r) })
	t.Run("bench", func(t *testing.T) { benchAll(t, e, r) })
}

func testCubinCache(t *testing.T, e *env) {
	arch := e.dev.Info().Arch()
	t0 := time.Now()
	cubins, hit, err := CompileKernels(e.nv, e.cache, arch)
	if err != nil || !hit || len(cubins) == 0 {
		t.Fatalf("second build: hit=%v, %d cubins, %v", hit, len(cubins), err)
	}
	size := 0
	for _, c := range cubins {
		size += len(c)
	}
	result(t, "nvrtc", "load cubins from cache", fmt.Sprintf("%.4f s", time.Since(t0).Seconds()), fmt.Sprintf("%d cubins, %d KiB", len(cubins), size>>10))
	_, err = e.nv.Compile("bad.cu", "extern \"C\" __global__ void f() { undefined_thing(); }", arch, nil)
	if err == nil || !strings.Contains(err.Error(), "undefined_thing") {
		t.Fatalf("compile error does not carry the log: %v", err)
	}
}

func testDo(t *testing.T, e *env) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.dev.Do(func() error {
				b, err := e.dev.Alloc(F32, 1024+g)
				if err != nil {
					return err
				}
				return e.dev.Free(b)
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := e.dev.Do(func() error { panic("boom") }); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("panic in closure gave %v", err)
	}
	if err := e.dev.Do(func() error { _, err := e.dev.Alloc(F32, 0); return err }); err == nil {
		t.Fatal("zero-size alloc accepted")
	}
	noBLAS := &Ops{Dev: e.dev, Kern: e.ops.Kern}
	if err := e.dev.Do(func() error { return noBLAS.MatMulT(Buffer{}, Buffer{}, Buffer{}, 1, 1, 1) }); err == nil {
		t.Fatal("matmul without a cuBLAS handle accepted")
	}
}

func testEmbedding(t *testing.T, e *env, r *rand.Rand) {
	const vocab, dim, n = 300, 96, 13
	for _, dt := range floatTypes {
		table, held := e.upload(t, dt, randVals(r, vocab*dim, 1))
		toks := make([]int32, n)
		for i := range toks {
			toks[i] = int32(r.IntN(vocab))
		}
		toks[3] = vocab + 5 // out of range: zero row
		tb := e.uploadI32(t, toks)
		out := e.poisoned(t, F32, n*dim)
		e.do(t, func() error { return e.ops.Embedding(out, table, tb, n, vocab, dim) })
		want := make([]float64, n*dim)
		for i, tok := range toks {
			if int(tok) < vocab {
				for j := range dim {
					want[i*dim+j] = float64(held[int(tok)*dim+j])
				}
			}
		}
		check(t, "embedding "+dt.String(), F32, e.download(t, out), want)
	}
}

func testRMSNorm(t *testing.T, e *env, r *rand.Rand) {
	const rows, eps = 7, 1e-5
	// 1000 and 4096 values fit the kernel's registers; 9000 takes its looping path.
	for _, c := range []struct {
		dim int
		dt  DType
	}{{1000, F32}, {1000, F16}, {1000, BF16}, {4096, F32}, {9000, F32}, {9000, BF16}} {
		dim, dt := c.dim, c.dt
		for _, withX := range []bool{false, true} {
			res0 := randVals(r, rows*dim, 2)
			xv := randVals(r, rows*dim, 1)
			wv := randVals(r, dim, 1.5)
			res, _ := e.upload(t, F32, res0)
			w, _ := e.upload(t, F32, wv)
			var x Buffer
			if withX {
				x, _ = e.upload(t, F32, xv)
			}
			out := e.poisoned(t, dt, rows*dim)
			e.do(t, func() error { return e.ops.RMSNorm(out, res, x, w, rows, dim, eps) })
			wantRes := make([]float64, rows*dim)
			want := make([]float64, rows*dim)
			for i := range rows {
				var ss float64
				for j := range dim {
					v := float64(res0[i*dim+j])
					if withX {
						v = float64(res0[i*dim+j] + xv[i*dim+j])
					}
					wantRes[i*dim+j] = v
					ss += v * v
				}
				inv := 1 / math.Sqrt(ss/float64(dim)+eps)
				for j := range dim {
					want[i*dim+j] = wantRes[i*dim+j] * inv * float64(wv[j])
				}
			}
			name := fmt.Sprintf("rmsnorm %s dim=%d residual=%v", dt, dim, withX)
			check(t, name, dt, e.download(t, out), want)
			check(t, name+" (residual)", F32, e.download(t, res), wantRes)
		}
	}
	// In place on float32 without x.
	const dim = 1000
	res0 := randVals(r, dim, 1)
	res, _ := e.upload(t, F32, res0)
	w, _ := e.upload(t, F32, make([]float32, dim))
	if err := e.dev.Do(func() error { return e.ops.RMSNorm(res, res, res, w, 1, dim, eps) }); err == nil {
		t.Error("rmsnorm with out aliasing residual and x accepted")
	}
}

func testElementwise(t *testing.T, e *env, r *rand.Rand) {
	const rows, dim = 9, 333
	fused := randVals(r, rows*2*dim, 4)
	in, _ := e.upload(t, F32, fused)
	gate, _ := in.Slice(0, in.Len)
	up, _ := in.Slice(dim, in.Len)
	want := make([]float64, rows*dim)
	for i := range rows {
		for j := range dim {
			g, u := float64(fused[i*2*dim+j]), float64(fused[i*2*dim+dim+j])
			want[i*dim+j] = g / (1 + math.Exp(-g)) * u
		}
	}
	for _, dt := range floatTypes {
		out := e.poisoned(t, dt, rows*dim)
		e.do(t, func() error { return e.ops.SwiGLU(out, gate, up, rows, dim, 2*dim) })
		check(t, "swiglu "+dt.String(), dt, e.download(t, out), want)
	}

	av, bv := randVals(r, 5000, 3), randVals(r, 5000, 3)
	a, _ := e.upload(t, F32, av)
	b, _ := e.upload(t, F32, bv)
	sum := e.poisoned(t, F32, 5000)
	e.do(t, func() error { return e.ops.Add(sum, a, b) })
	wantSum := make([]float64, len(av))
	for i := range av {
		wantSum[i] = float64(av[i] + bv[i])
	}
	check(t, "add f32", F32, e.download(t, sum), wantSum)
	for _, dt := range []DType{F16, BF16} {
		out := e.poisoned(t, dt, 5000)
		e.do(t, func() error { return e.ops.Cast(out, a) })
		check(t, "cast f32->"+dt.String(), dt, e.download(t, out), f64(av))
	}

	idx := []int32{4, 0, 4, 8}
	ib := e.uploadI32(t, idx)
	g := e.poisoned(t, F32, len(idx)*dim)
	e.do(t, func() error { return e.ops.GatherRows(g, in, ib, len(idx), dim) })
	wantG := make([]float64, len(idx)*dim)
	for i, row := range idx {
		for j := range dim {
			wantG[i*dim+j] = float64(fused[int(row)*dim+j])
		}
	}
	check(t, "gather rows", F32, e.download(t, g), wantG)
}

// invFreqs returns the rotary inverse frequencies theta^(-2i/dim).
func invFreqs(dim int, theta float64) []float32 {
	f := make([]float32, dim/2)
	for i := range f {
		f[i] = float32(1 / math.Pow(theta, float64(2*i)/float64(dim)))
	}
	return f
}

// ropeRef rotates v (one head) as the model's reference path does.
func ropeRef(v []float64, pos int, inv []float32, mscale float64, neox bool) {
	half := len(inv)
	for i := range half {
		ang := float64(float32(pos) * inv[i])
		s, c := math.Sincos(ang)
		s, c = s*mscale, c*mscale
		a, b := 2*i, 2*i+1
		if neox {
			a, b = i, i+half
		}
		x, y := v[a], v[b]
		v[a] = x*c - y*s
		v[b] = x*s + y*c
	}
}

func testRopeKV(t *testing.T, e *env, r *rand.Rand) {
	const tokens, heads, kvHeads, hd, blocks, bs = 6, 8, 2, 64, 5, 4
	for _, dt := range floatTypes {
		for _, neox := range []bool{false, true} {
			ropeDim := hd
			if neox {
				ropeDim = 32 // partial rotary
			}
			inv := invFreqs(ropeDim, 10000)
			const mscale = 1.25
			stride := (heads + 2*kvHeads) * hd // fused QKV rows
			qkv := randVals(r, tokens*stride, 1)
			buf, _ := e.upload(t, F32, qkv)
			q, _ := buf.Slice(0, buf.Len)
			k, _ := buf.Slice(heads*hd, buf.Len)
			v, _ := buf.Slice((heads+kvHeads)*hd, buf.Len)
			pos := []int32{0, 1, 7, 300, 4095, 12}
			slots := []int32{3, 0, -1, 19, 8, 7}
			invB, _ := e.upload(t, F32, inv)
			n := blocks * bs * kvHeads * hd
			cache := &KVCacheLayer{K: e.poisoned(t, dt, n), V: e.poisoned(t, dt, n), NumBlocks: blocks, BlockSize: bs, KVHeads: kvHeads, HeadDim: hd}
			args := RopeKVArgs{Q: q, K: k, V: v, QStride: stride, KStride: stride, VStride: stride, Tokens: tokens, Heads: heads,
				Positions: e.uploadI32(t, pos), Slots: e.uploadI32(t, slots),
				Rope: Rope{InvFreq: invB, Dim: ropeDim, NeoX: neox, MScale: mscale}, Cache: cache}
			e.do(t, func() error { return e.ops.RopeKV(args) })

			gotQKV := e.download(t, buf)
			gotK, gotV := e.download(t, cache.K), e.download(t, cache.V)
			var wantQ, gq, wantK, gk, wantV, gv, wantKIn, gkIn []float64
			for ti := range tokens {
				for h := range heads {
					row := f64(qkv[ti*stride+h*hd:][:hd])
					ropeRef(row[:ropeDim], int(pos[ti]), inv, mscale, neox)
					wantQ = append(wantQ, row...)
					gq = append(gq, f64(gotQKV[ti*stride+h*hd:][:hd])...)
				}
				for h := range kvHeads {
					// k is rotated in place whether or not the token has a slot.
					kr := f64(qkv[ti*stride+(heads+h)*hd:][:hd])
					ropeRef(kr[:ropeDim], int(pos[ti]), inv, mscale, neox)
					wantKIn = append(wantKIn, kr...)
					gkIn = append(gkIn, f64(gotQKV[ti*stride+(heads+h)*hd:][:hd])...)
				}
				if slots[ti] < 0 {
					continue
				}
				for h := range kvHeads {
					kr := f64(qkv[ti*stride+(heads+h)*hd:][:hd])
					ropeRef(kr[:ropeDim], int(pos[ti]), inv, mscale, neox)
					wantK = append(wantK, kr...)
					wantV = append(wantV, f64(qkv[ti*stride+(heads+kvHeads+h)*hd:][:hd])...)
					off := (int(slots[ti])*kvHeads + h) * hd
					gk = append(gk, f64(gotK[off:][:hd])...)
					gv = append(gv, f64(gotV[off:][:hd])...)
				}
			}
			name := fmt.Sprintf("rope kv %s neox=%v", dt, neox)
			check(t, name+" (q)", F32, toF32(gq), wantQ)
			check(t, name+" (k in place)", F32, toF32(gkIn), wantKIn)
			check(t, name+" (k cache)", dt, toF32(gk), wantK)
			check(t, name+" (v cache)", dt, toF32(gv), wantV)
			// Slots nobody wrote stay poisoned.
			if !math.IsNaN(float64(gotK[(2*kvHeads)*hd])) {
				t.Errorf("%s: slot 2 of the cache was written", name)
			}
		}
	}
}

func toF32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// pagedCache fills a cache of numBlocks blocks with random K/V and returns the values as
// held on the device, indexed [slot][kvHead][headDim].
func pagedCache(t *testing.T, e *env, r *rand.Rand, dt DType, numBlocks, bs, kvHeads, hd int) (*KVCacheLayer, []float32, []float32) {
	n := numBlocks * bs * kvHeads * hd
	k, kh := e.upload(t, dt, randVals(r, n, 1))
	v, vh := e.upload(t, dt, randVals(r, n, 1))
	return &KVCacheLayer{K: k, V: v, NumBlocks: numBlocks, BlockSize: bs, KVHeads: kvHeads, HeadDim: hd}, kh, vh
}

// attnRef computes softmax(scale q·k) v for one query head over positions 0..ctx-1 of a
// sequence with block table bt.
func attnRef(q []float32, kh, vh []float32, bt []int32, ctx, bs, kvHeads, kvh, hd int, scale float64) []float64 {
	scores := make([]float64, ctx)
	m := math.Inf(-1)
	for p := range ctx {
		off := ((int(bt[p/bs])*bs+p%bs)*kvHeads + kvh) * hd
		var d float64
		for i := range hd {
			d += float64(q[i]) * float64(kh[off+i])
		}
		scores[p] = d * scale
		m = math.Max(m, scores[p])
	}
	out := make([]float64, hd)
	var l float64
	for p := range ctx {
		w := math.Exp(scores[p] - m)
		l += w
		off := ((int(bt[p/bs])*bs+p%bs)*kvHeads + kvh) * hd
		for i := range hd {
			out[i] += w * float64(vh[off+i])
		}
	}
	for i := range out {
		out[i] /= l
	}
	return out
}

// blockTables assigns each sequence maxBlocks distinct random physical blocks.
func blockTables(r *rand.Rand, seqs, maxBlocks, numBlocks int) []int32 {
	perm := r.Perm(numBlocks)
	bt := make([]int32, seqs*maxBlocks)
	for i := range bt {
		bt[i] = int32(perm[i%numBlocks])
	}
	return bt
}

func testDecode(t *testing.T, e *env, r *rand.Rand) {
	const heads, kvHeads, bs = 8, 2, 16
	ctxs := []int32{1, 17, 300, 1000, 64}
	seqs := len(ctxs)
	maxBlocks := 1000/bs + 1
	for _, hd := range []int{64, 128} {
		for _, dt := range floatTypes {
			numBlocks := seqs * maxBlocks
			cache, kh, vh := pagedCache(t, e, r, dt, numBlocks, bs, kvHeads, hd)
			bt := blockTables(r, seqs, maxBlocks, numBlocks)
			qv := randVals(r, seqs*heads*hd, 1)
			qb, _ := e.upload(t, F32, qv)
			scale := float32(1 / math.Sqrt(float64(hd)))
			var work *DecodeWorkspace
			e.do(t, func() error {
				var err error
				work, err = e.dev.NewDecodeWorkspace(seqs, heads, 64, hd)
				return err
			})
			want := make([]float64, 0, seqs*heads*hd)
			for s := range seqs {
				for h := range heads {
					want = append(want, attnRef(qv[(s*heads+h)*hd:][:hd], kh, vh, bt[s*maxBlocks:], int(ctxs[s]), bs, kvHeads, h/(heads/kvHeads), hd, float64(scale))...)
				}
			}
			for _, legacy := range []bool{false, true} {
				for _, splits := range []int{1, 7, 0} {
					for _, odt := range []DType{F32, BF16} {
						out := e.poisoned(t, odt, seqs*heads*hd)
						args := DecodeArgs{Out: out, OutStride: heads * hd, Q: qb, QStride: heads * hd, Seqs: seqs, Heads: heads, Cache: cache,
							BlockTables: e.uploadI32(t, bt), MaxBlocks: maxBlocks, ContextLens: e.uploadI32(t, ctxs), MaxContext: 1000,
							Scale: scale, Work: work, Splits: splits, legacy: legacy}
						e.do(t, func() error { return e.ops.AttentionDecode(args) })
						tl := odt
						if dt != F32 && odt == F32 {
							tl = F16 // inputs were rounded already; only accumulation differs
						}
						check(t, fmt.Sprintf("decode hd=%d cache=%s out=%s splits=%d legacy=%v", hd, dt, odt, splits, legacy), tl, e.download(t, out), want)
					}
				}
			}
			e.do(t, func() error { return e.dev.FreeDecodeWorkspace(work) })
		}
	}
}

func testPrefill(t *testing.T, e *env, r *rand.Rand) {
	for _, hd := range []int{128, 64} {
		testPrefillHead(t, e, r, hd)
	}
}

// testPrefillHead checks AttentionPrefill at head size hd against attnRef for every cache
// and output dtype; BF16 caches of head size 64 and 128 run the tensor-core kernel (BF16
// queries and probabilities, so BF16's tolerance) and, forced, the scalar one too.
func testPrefillHead(t *testing.T, e *env, r *rand.Rand, hd int) {
	const heads, kvHeads, bs = 8, 4, 16
	// Sequences: (cached prefix, new tokens): a fresh prompt, a prefix-cache hit with a
	// chunk, a single token, and a chunk not aligned to the block size.
	type seqSpec struct{ prefix, n int }
	specs := []seqSpec{{0, 37}, {50, 20}, {0, 1}, {129, 70}, {3, 150}}
	maxBlocks := 0
	var starts, ctxs []int32
	total, maxQ := 0, 0
	for _, s := range specs {
		starts = append(starts, int32(total))
		ctxs = append(ctxs, int32(s.prefix+s.n))
		total += s.n
		maxQ = max(maxQ, s.n)
		maxBlocks = max(maxBlocks, (s.prefix+s.n+bs-1)/bs)
	}
	starts = append(starts, int32(total))
	for _, dt := range floatTypes {
		numBlocks := len(specs) * maxBlocks
		cache, kh, vh := pagedCache(t, e, r, dt, numBlocks, bs, kvHeads, hd)
		bt := blockTables(r, len(specs), maxBlocks, numBlocks)
		qStride := (heads + 2*kvHeads) * hd // q inside a fused QKV buffer
		qv := randVals(r, total*qStride, 1)
		qb, _ := e.upload(t, F32, qv)
		scale := float32(1 / math.Sqrt(float64(hd)))
		var want []float64
		for si, s := range specs {
			for i := range s.n {
				tok := int(starts[si]) + i
				for h := range heads {
					want = append(want, attnRef(qv[tok*qStride+h*hd:][:hd], kh, vh, bt[si*maxBlocks:], s.prefix+i+1, bs, kvHeads, h/(heads/kvHeads), hd, float64(scale))...)
				}
			}
		}
		tc := prefillTensorCores(dt, hd)
		for _, odt := range floatTypes {
			for _, scalar := range []bool{false, true} {
				if scalar && !tc {
					continue
				}
				out := e.poisoned(t, odt, total*heads*hd)
				args := PrefillArgs{Out: out, OutStride: heads * hd, Q: qb, QStride: qStride, Tokens: total, Seqs: len(specs), Heads: heads,
					Cache: cache, SeqStarts: e.uploadI32(t, starts), ContextLens: e.uploadI32(t, ctxs), MaxQueryLen: maxQ,
					BlockTables: e.uploadI32(t, bt), MaxBlocks: maxBlocks, Scale: scale, scalar: scalar}
				e.do(t, func() error { return e.ops.AttentionPrefill(args) })
				tl := odt
				if dt != F32 && odt == F32 {
					tl = F16
				}
				kind := "scalar"
				if tc && !scalar {
					kind, tl = "tensor cores", BF16
				}
				check(t, fmt.Sprintf("prefill hd=%d cache=%s out=%s (%s)", hd, dt, odt, kind), tl, e.download(t, out), want)
			}
		}
	}
}

func testMatMul(t *testing.T, e *env, r *rand.Rand) {
	const n, k, m = 37, 256, 96
	xv, wv := randVals(r, n*k, 1), randVals(r, m*k, 1)
	for _, dt := range floatTypes {
		x, xh := e.upload(t, dt, xv)
		w, wh := e.upload(t, dt, wv)
		want := make([]float64, n*m)
		for i := range n {
			for j := range m {
				var s float64
				for c := range k {
					s += float64(xh[i*k+c]) * float64(wh[j*k+c])
				}
				want[i*m+j] = s
			}
		}
		outs := []DType{F32}
		if dt != F32 {
			outs = append(outs, dt)
		}
		for _, odt := range outs {
			y := e.poisoned(t, odt, n*m)
			e.do(t, func() error { return e.ops.MatMulT(y, x, w, n, k, m) })
			tl := odt
			if odt == F32 && dt != F32 {
				tl = F32
			}
			check(t, fmt.Sprintf("cublas gemm %s->%s", dt, odt), tl, e.download(t, y), want)
		}
	}
}

func testArgmax(t *testing.T, e *env, r *rand.Rand) {
	const rows, vocab = 5, 50000
	lv := randVals(r, rows*vocab, 10)
	want := []int32{123, 49999, 0, 777, 31000}
	for i, w := range want {
		lv[i*vocab+int(w)] = 50
	}
	lv[3*vocab+778] = 50 // a tie: the lower index wins
	lv[2*vocab+5] = float32(math.NaN())
	lb, _ := e.upload(t, F32, lv)
	out := e.uploadI32(t, make([]int32, rows))
	work := e.poisoned(t, F32, 2*ArgmaxParts*rows)
	e.do(t, func() error { return e.ops.Argmax(out, lb, work, rows, vocab, Buffer{}) })
	got := e.downloadI32(t, out)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("argmax row %d = %d, want %d", i, got[i], want[i])
		}
	}
	result(t, "kernel", "argmax f32", fmt.Sprintf("%d/%d rows", countEq(got, want), rows), "exact")
}

func countEq(a, b []int32) int {
	n := 0
	for i := range a {
		if a[i] == b[i] {
			n++
		}
	}
	return n
}

// sampleRef returns the token the sampler must draw and the smallest distance, as a
// fraction of the kept mass, from the draw or the top-p cut to a decision boundary.
func sampleRef(lg []float32, temp float64, topk int, topp, u float64) (int, float64) {
	vocab := len(lg)
	idx := make([]int, vocab)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return lg[idx[a]] > lg[idx[b]] })
	m := float64(lg[idx[0]])
	p := func(i int) float64 { return math.Exp((float64(lg[i]) - m) / temp) }
	thr := float32(math.Inf(-1))
	if topk > 0 && topk < vocab {
		thr = lg[idx[topk-1]]
	}
	margin := 1.0
	if topp < 1 {
		var z float64
		for _, i := range idx {
			if lg[i] >= thr {
				z += p(i)
			}
		}
		var cum float64
		for _, i := range idx {
			if lg[i] < thr {
				break
			}
			prev := cum
			cum += p(i)
			if cum >= topp*z {
				thr = lg[i]
				margin = math.Min(math.Abs(cum-topp*z), math.Abs(prev-topp*z)) / z
				break
			}
		}
	}
	var z float64
	for i := range vocab {
		if lg[i] >= thr {
			z += p(i)
		}
	}
	target := u * z
	var cum float64
	last := -1
	for i := range vocab {
		if lg[i] < thr {
			continue
		}
		prev := cum
		cum += p(i)
		last = i
		if cum >= target {
			return i, math.Min(margin, math.Min(cum-target, target-prev)/z)
		}
	}
	return last, 0
}

func testSample(t *testing.T, e *env, r *rand.Rand) {
	const vocab = 32000
	type row struct {
		temp float32
		topk int32
		topp float32
	}
	var rows []row
	for _, temp := range []float32{0.7, 1, 1.5} {
		for _, topk := range []int32{0, 1, 40, 1000} {
			for _, topp := range []float32{1, 0.9, 0.5} {
				rows = append(rows, row{temp, topk, topp})
			}
		}
	}
	n := len(rows) * 4
	lv := randVals(r, n*vocab, 8)
	temps, topps, us := make([]float32, n), make([]float32, n), make([]float32, n)
	topks := make([]int32, n)
	for i := range n {
		rw := rows[i%len(rows)]
		temps[i], topks[i], topps[i], us[i] = rw.temp, rw.topk, rw.topp, r.Float32()
	}
	us[0] = 0
	lb, _ := e.upload(t, F32, lv)
	tb, _ := e.upload(t, F32, temps)
	pb, _ := e.upload(t, F32, topps)
	ub, _ := e.upload(t, F32, us)
	out := e.uploadI32(t, make([]int32, n))
	params := SampleParams{Temperature: tb, TopK: e.uploadI32(t, topks), TopP: pb, Uniform: ub}
	e.do(t, func() error { return e.ops.Sample(out, lb, n, vocab, params) })
	got := e.downloadI32(t, out)
	exact, close := 0, 0
	for i := range n {
		want, margin := sampleRef(lv[i*vocab:][:vocab], float64(temps[i]), int(topks[i]), float64(topps[i]), float64(us[i]))
		switch {
		case int(got[i]) == want:
			exact++
		case margin < 1e-4:
			close++ // within float rounding of a boundary
		default:
			t.Errorf("sample row %d (T=%g k=%d p=%g u=%g): got %d, want %d (margin %.2g)", i, temps[i], topks[i], topps[i], us[i], got[i], want, margin)
		}
	}
	result(t, "kernel", "sample top-k/top-p f32", fmt.Sprintf("%d/%d rows exact", exact, n), fmt.Sprintf("%d at a rounding boundary", close))
}

func testGraph(t *testing.T, e *env, r *rand.Rand) {
	const rows, dim = 4, 512
	res0 := randVals(r, rows*dim, 1)
	res, _ := e.upload(t, F32, res0)
	wv := randVals(r, dim, 1)
	w, _ := e.upload(t, F32, wv)
	out := e.poisoned(t, F32, rows*dim)
	var g *Graph
	e.do(t, func() error {
		var err error
		g, err = e.dev.Capture(func() error { return e.ops.RMSNorm(out, res, Buffer{}, w, rows, dim, 1e-6) })
		return err
	})
	defer e.dev.Do(func() error { return e.dev.FreeGraph(g) })
	// Capture queued nothing: the output is still poisoned.
	if v := e.download(t, out); !math.IsNaN(float64(v[0])) {
		t.Fatal("capture ran the kernel")
	}
	// New input, then replay.
	res1 := randVals(r, rows*dim, 1)
	e.do(t, func() error { return Upload(e.dev, res, res1) })
	e.do(t, func() error { return e.dev.LaunchGraph(g) })
	want := make([]float64, rows*dim)
	for i := range rows {
		var ss float64
		for j := range dim {
			ss += float64(res1[i*dim+j]) * float64(res1[i*dim+j])
		}
		inv := 1 / math.Sqrt(ss/dim+1e-6)
		for j := range dim {
			want[i*dim+j] = float64(res1[i*dim+j]) * inv * float64(wv[j])
		}
	}
	check(t, "graph replay rmsnorm", F32, e.download(t, out), want)

	// Launch overhead: 200 small launches directly vs. captured in one graph.
	const launches = 200
	queue := func() error {
		for range launches {
			if err := e.ops.RMSNorm(out, res, Buffer{}, w, rows, dim, 1e-6); err != nil {
				return err
			}
		}
		return nil
	}
	var direct, replay float64
	e.do(t, func() error {
		big, err := e.dev.Capture(queue)
		if err != nil {
			return err
		}
		defer e.dev.FreeGraph(big)
		tm, err := e.dev.NewTimer()
		if err != nil {
			return err
		}
		defer e.dev.FreeTimer(tm)
		for rep := range 3 {
			e.dev.Start(tm)
			if err := queue(); err != nil {
				return err
			}
			ms, err := e.dev.Stop(tm)
			if err != nil {
				return err
			}
			e.dev.Start(tm)
			if err := e.dev.LaunchGraph(big); err != nil {
				return err
			}
			ms2, err := e.dev.Stop(tm)
			if err != nil {
				return err
			}
			if rep == 2 {
				direct, replay = ms, ms2
			}
		}
		return nil
	})
	result(t, "launch", "200 small kernels direct", fmt.Sprintf("%.1f us/kernel", direct*1000/launches), "stream launches through purego")
	result(t, "launch", "200 small kernels graph replay", fmt.Sprintf("%.1f us/kernel", replay*1000/launches), "one cuGraphLaunch")
}

func TestDeviceClose(t *testing.T) {
	drv, _ := gpuDriver(t)
	if _, err := drv.OpenDevice(1<<20, DeviceOptions{}); err == nil {
		t.Fatal("opening a device that does not exist succeeded")
	}
	dev, err := drv.OpenDevice(0, DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Do(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := dev.Do(func() error { return nil }); err == nil {
		t.Fatal("Do after Close succeeded")
	}
}
