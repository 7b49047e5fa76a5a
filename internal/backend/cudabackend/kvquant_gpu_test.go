package cudabackend

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/kvquant"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// The quantized KV cache's kernels on the GPU against the CPU backend's kernels (package
// cpu) on the same inputs: the store (RopeKVWrite into codes and scales) byte for byte
// against the CPU's quantization of the same rotated values, and attention (decode,
// varlen prefill, verification-sized chunks, windows, soft-capping; grouped and plain
// shapes, head sizes 40 to 128) over the same cache bytes, moved from the CPU's cache to
// the GPU's through WriteBlocks.

var kvQuantTypes = []quant.Type{quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2}

// kvqHeads are the attention shapes of the tests: the grouped decode kernel's (head sizes
// 64 and 128, groups 1, 2, 4, 8) and the varlen kernel's alone (group 3, head sizes 96
// and 40: a 40-element head is one scale group).
var kvqHeads = []struct{ heads, kvHeads, headDim int }{
	{8, 2, 128}, {4, 4, 64}, {16, 2, 64}, {4, 2, 64}, {6, 2, 64}, {4, 2, 96}, {3, 1, 40},
}

// kvqValues returns n values of a head-vector-like spread: mostly within ±2, one in 16
// ten times larger (a group's outlier), so groups get different scales.
func kvqValues(r *rand.Rand, n int) []float32 {
	v := randVals(r, n, 2)
	for i := range v {
		if r.IntN(16) == 0 {
			v[i] *= 10
		}
	}
	return v
}

// uploadStep uploads meta inside Run.
func uploadStep(t *testing.T, b *Backend, meta *backend.StepMeta) backend.Step {
	t.Helper()
	var st backend.Step
	if err := b.Run(func() (err error) { st, err = b.UploadStep(meta); return err }); err != nil {
		t.Fatal(err)
	}
	return st
}

// newKV makes a one-layer GPU cache of spec.
func newKV(t *testing.T, b *Backend, spec backend.KVSpec) backend.KVCache {
	t.Helper()
	var kv backend.KVCache
	if err := b.Run(func() (err error) { kv, err = b.NewKVCache(spec); return err }); err != nil {
		t.Fatal(err)
	}
	return kv
}

// readAll returns the bytes of blocks 0..n-1 of kv in the host layout.
func readAll(t *testing.T, b *Backend, kv backend.KVCache, n int) []byte {
	t.Helper()
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	out := make([]byte, n*kv.Spec().BlockBytes())
	if err := b.Run(func() error { return b.ReadBlocks(kv, ids, out) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// cpuLayerBytes returns the bytes of every block of a one-layer CPU cache in the host
// layout (keys then values of each block).
func cpuLayerBytes(t *testing.T, l *cpu.KVCacheLayer) []byte {
	t.Helper()
	per := l.BlockBytes()
	out := make([]byte, 2*per*l.NumBlocks())
	for blk := range l.NumBlocks() {
		if err := l.ReadBlock(blk, out[2*blk*per:][:per], out[(2*blk+1)*per:][:per]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// f32Blocks reads a one-layer F32 cache's host bytes as its keys and values,
// [slot][kvHeads*headDim] each.
func f32Blocks(data []byte, numBlocks, per int) (k, v []float32) {
	for blk := range numBlocks {
		for half := range 2 {
			part := data[(2*blk+half)*4*per:][:4*per]
			for i := range per {
				x := math.Float32frombits(uint32(part[4*i]) | uint32(part[4*i+1])<<8 | uint32(part[4*i+2])<<16 | uint32(part[4*i+3])<<24)
				if half == 0 {
					k = append(k, x)
				} else {
					v = append(v, x)
				}
			}
		}
	}
	return k, v
}

// TestKVQuantStore: RopeKVWrite into a quantized cache rotates the queries as it does for
// an F32 cache (bit for bit) and writes the codes and scales the CPU's quantization
// (cpu.WriteKV, package kvquant) gives for the keys and values the F32 cache holds: at
// position 0 (no rotation) byte for byte; at other positions byte for byte but for codes
// at a rounding boundary of the two devices' rotations (at most 1 in 1000, each one code
// step off), with a zero group, a skipped token (slot -1), partial rotary and NeoX pairs.
func TestKVQuantStore(t *testing.T) {
	b := openBackend(t, BackendOptions{})
	const bs, numBlocks, n = 16, 5, 37
	for _, dt := range kvQuantTypes {
		for _, sh := range []struct {
			heads, kvHeads, headDim, ropeDim int
			neox                             bool
		}{{8, 2, 128, 128, false}, {6, 3, 64, 32, true}, {3, 1, 40, 40, false}} {
			for _, moved := range []bool{false, true} {
				name := fmt.Sprintf("%s heads %d/%d of %d rope %d, moved %v", dt, sh.heads, sh.kvHeads, sh.headDim, sh.ropeDim, moved)
				r := rand.New(rand.NewPCG(uint64(sh.headDim), uint64(dt)))
				qDim, kvDim := sh.heads*sh.headDim, sh.kvHeads*sh.headDim
				qv, kv, vv := kvqValues(r, n*qDim), kvqValues(r, n*kvDim), kvqValues(r, n*kvDim)
				clear(kv[5*kvDim:][:kvquant.Group(sh.headDim)]) // a group of zeros
				meta := &backend.StepMeta{QueryStarts: []int32{0, n}, ContextLens: []int32{n}, MaxBlocks: numBlocks,
					BlockTables: []int32{0, 1, 2, 3, 4}, MaxQueryLen: n, MaxContextLen: n}
				slots := r.Perm(numBlocks * bs)
				for i := range n {
					meta.Tokens = append(meta.Tokens, 1)
					pos := 0
					if moved {
						pos = r.IntN(4000)
					}
					meta.Positions = append(meta.Positions, int32(pos))
					meta.SlotMapping = append(meta.SlotMapping, int32(slots[i]))
				}
				meta.SlotMapping[9] = -1
				inv := make([]float32, sh.ropeDim/2)
				for i := range inv {
					inv[i] = float32(math.Pow(10000, -2*float64(i)/float64(sh.ropeDim)))
				}
				spec := backend.KVSpec{Layers: 1, NumBlocks: numBlocks, BlockSize: bs, KVHeads: sh.kvHeads, HeadDim: sh.headDim, DType: dt}
				qc, fc := newKV(t, b, spec), newKV(t, b, backend.KVSpec{Layers: 1, NumBlocks: numBlocks, BlockSize: bs, KVHeads: sh.kvHeads, HeadDim: sh.headDim, DType: quant.F32})
				q1, q2 := putF32(t, b, n, qDim, qv), putF32(t, b, n, qDim, qv)
				k, v, invT := putF32(t, b, n, kvDim, kv), putF32(t, b, n, kvDim, vv), putF32(t, b, 1, len(inv), inv)
				st := uploadStep(t, b, meta)
				rope := backend.Rope{InvFreq: invT, Dim: sh.ropeDim, NeoX: sh.neox, MScale: 1}
				err := b.Run(func() error {
					return firstErr(b.RopeKVWrite(q1, k, v, rope, qc, 0, st), b.RopeKVWrite(q2, k, v, rope, fc, 0, st))
				})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !bytes.Equal(f32Bytes(getF32(t, b, q1)), f32Bytes(getF32(t, b, q2))) {
					t.Errorf("%s: rotated queries differ from the F32 cache's rope kv", name)
				}
				got := readAll(t, b, qc, numBlocks)
				rk, rv := f32Blocks(readAll(t, b, fc, numBlocks), numBlocks, bs*kvDim)
				ref, err := cpu.NewKVCacheLayer(numBlocks, bs, sh.kvHeads, sh.headDim, dt)
				if err != nil {
					t.Fatal(err)
				}
				all := make([]int32, numBlocks*bs)
				for i := range all {
					all[i] = int32(i)
				}
				if err := cpu.WriteKV(ref, rk, rv, all); err != nil {
					t.Fatal(err)
				}
				want := cpuLayerBytes(t, ref)
				diff := 0
				for i := range got {
					if got[i] != want[i] {
						diff++
					}
				}
				// The differing bytes, if any, must be codes one step apart: dequantized,
				// both caches hold the F32 cache's values within the type's rounding.
				e := kvqDequantErr(t, got, rk, rv, spec)
				result(t, "kernel", "rope kv store "+name, fmt.Sprintf("%d/%d bytes differ", diff, len(got)), fmt.Sprintf("dequantized rel. error %.2e", e))
				if !moved && diff != 0 || diff*1000 > len(got) {
					t.Errorf("%s: %d of %d bytes differ from the CPU's quantization", name, diff, len(got))
				}
				if tol := kvqTol[dt]; !(e <= tol) {
					t.Errorf("%s: dequantized cache %.3g from the F32 cache (relative), allowed %g", name, e, tol)
				}
			}
		}
	}
}

// kvqTol bounds the relative error of a quantized cache's values: about half a code step
// of the type at the group's largest magnitudes.
var kvqTol = map[quant.Type]float64{quant.KVInt8: 3e-2, quant.KVFP8E4M3: 6e-2, quant.KVFP8E5M2: 1.2e-1}

// kvqDequantErr returns the relative error of the quantized host bytes data (one layer,
// every block) against the values k and v ([slot][kvHeads*headDim]).
func kvqDequantErr(t *testing.T, data []byte, k, v []float32, spec backend.KVSpec) float64 {
	t.Helper()
	l, err := cpu.NewKVCacheLayer(spec.NumBlocks, spec.BlockSize, spec.KVHeads, spec.HeadDim, spec.DType)
	if err != nil {
		t.Fatal(err)
	}
	per := l.BlockBytes()
	for blk := range spec.NumBlocks {
		if err := l.WriteBlock(blk, data[2*blk*per:][:per], data[(2*blk+1)*per:][:per]); err != nil {
			t.Fatal(err)
		}
	}
	codec, err := kvquant.NewCodec(spec.DType)
	if err != nil {
		t.Fatal(err)
	}
	g := kvquant.Group(spec.HeadDim)
	dk, dv := make([]float32, len(l.K8)), make([]float32, len(l.V8))
	codec.Dequantize(dk, l.K8, l.KS, g)
	codec.Dequantize(dv, l.V8, l.VS, g)
	return max(relErr32(dk, k), relErr32(dv, v))
}

// relErr32 returns ‖a − b‖ / ‖b‖ (+Inf on a length mismatch or NaN).
func relErr32(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range b {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	e := math.Sqrt(num / max(den, 1e-300))
	if math.IsNaN(e) {
		return math.Inf(1)
	}
	return e
}

// kvqSeq is one sequence of an attention step: query tokens over a context.
type kvqSeq struct{ query, context int }

// TestKVQuantAttention: attention over a quantized cache on the GPU gives the CPU
// kernels' output (cpu.AttentionWith) over the same cache bytes within 1e-4 (float32
// arithmetic in other orders; 1e-2 where chunks of more than 17 queries run on tensor
// cores in BF16), for every code type and shape of kvqHeads: decode steps (long contexts
// split-K and merged, a context of one), prefill chunks over cached prefixes mixed with
// decode tokens, long chunks, verification-sized chunks, and windowed, soft-capped and
// both. The cache's bytes read back from the GPU as the CPU wrote them.
func TestKVQuantAttention(t *testing.T) {
	b := openBackend(t, BackendOptions{})
	pool := cpu.NewPool(4)
	defer pool.Close()
	const bs = 16
	steps := []struct {
		name string
		seqs []kvqSeq
		opt  backend.AttentionOptions
	}{
		{"decode", []kvqSeq{{1, 1200}, {1, 33}, {1, 1}}, backend.AttentionOptions{}},
		{"decode one long", []kvqSeq{{1, 3000}}, backend.AttentionOptions{}},
		{"prefill mixed", []kvqSeq{{37, 37}, {20, 300}, {1, 50}}, backend.AttentionOptions{}},
		{"prefill long", []kvqSeq{{100, 1000}, {70, 70}}, backend.AttentionOptions{}},
		{"verify", []kvqSeq{{5, 200}, {17, 90}}, backend.AttentionOptions{}},
		{"window 64", []kvqSeq{{37, 37}, {20, 300}, {1, 500}}, backend.AttentionOptions{Window: 64}},
		{"softcap 30", []kvqSeq{{20, 300}, {1, 200}}, backend.AttentionOptions{Softcap: 30}},
		{"window 100 softcap 20", []kvqSeq{{1, 700}, {9, 150}}, backend.AttentionOptions{Window: 100, Softcap: 20}},
	}
	for _, dt := range kvQuantTypes {
		for _, sh := range kvqHeads {
			r := rand.New(rand.NewPCG(uint64(sh.headDim*sh.heads), uint64(dt)))
			const numBlocks = 200
			kvDim, qDim := sh.kvHeads*sh.headDim, sh.heads*sh.headDim
			ref, err := cpu.NewKVCacheLayer(numBlocks, bs, sh.kvHeads, sh.headDim, dt)
			if err != nil {
				t.Fatal(err)
			}
			all := make([]int32, numBlocks*bs)
			for i := range all {
				all[i] = int32(i)
			}
			if err := cpu.WriteKV(ref, kvqValues(r, len(all)*kvDim), kvqValues(r, len(all)*kvDim), all); err != nil {
				t.Fatal(err)
			}
			data := cpuLayerBytes(t, ref)
			spec := backend.KVSpec{Layers: 1, NumBlocks: numBlocks, BlockSize: bs, KVHeads: sh.kvHeads, HeadDim: sh.headDim, DType: dt}
			kv := newKV(t, b, spec)
			ids := make([]int32, numBlocks)
			for i := range ids {
				ids[i] = int32(i)
			}
			if err := b.Run(func() error { return b.WriteBlocks(kv, ids, data) }); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readAll(t, b, kv, numBlocks), data) {
				t.Fatalf("%s: the CPU cache's blocks read back from the GPU otherwise", dt)
			}
			scale := float32(1 / math.Sqrt(float64(sh.headDim)))
			for _, step := range steps {
				name := fmt.Sprintf("%s heads %d/%d of %d, %s", dt, sh.heads, sh.kvHeads, sh.headDim, step.name)
				meta := &backend.StepMeta{QueryStarts: []int32{0}}
				maxBlocks := 0
				for _, s := range step.seqs {
					maxBlocks = max(maxBlocks, (s.context+bs-1)/bs)
				}
				meta.MaxBlocks = maxBlocks
				perm := r.Perm(numBlocks)
				for i, s := range step.seqs {
					table := make([]int32, maxBlocks)
					for j := range (s.context + bs - 1) / bs {
						table[j] = int32(perm[(i*maxBlocks+j)%numBlocks])
					}
					meta.BlockTables = append(meta.BlockTables, table...)
					for j := range s.query {
						p := s.context - s.query + j
						meta.Tokens = append(meta.Tokens, 1)
						meta.Positions = append(meta.Positions, int32(p))
						meta.SlotMapping = append(meta.SlotMapping, table[p/bs]*bs+int32(p%bs))
					}
					meta.QueryStarts = append(meta.QueryStarts, int32(len(meta.Tokens)))
					meta.ContextLens = append(meta.ContextLens, int32(s.context))
					meta.MaxQueryLen, meta.MaxContextLen = max(meta.MaxQueryLen, s.query), max(meta.MaxContextLen, s.context)
				}
				n := len(meta.Tokens)
				qv := randVals(r, n*qDim, 1.5)
				want := make([]float32, n*qDim)
				opt := step.opt
				opt.Scale = scale
				for i, s := range step.seqs {
					t0 := int(meta.QueryStarts[i])
					ctx := make([]int32, s.query)
					for j := range ctx {
						ctx[j] = int32(s.context - s.query + j)
					}
					err := cpu.AttentionWith(pool, want[t0*qDim:(t0+s.query)*qDim], qv[t0*qDim:(t0+s.query)*qDim], s.query, sh.heads, ref,
						meta.BlockTables[i*maxBlocks:(i+1)*maxBlocks], ctx, cpu.AttnOptions{Scale: scale, Window: opt.Window, Softcap: opt.Softcap})
					if err != nil {
						t.Fatal(err)
					}
				}
				q, out := putF32(t, b, n, qDim, qv), newOut(t, b, n, qDim)
				st := uploadStep(t, b, meta)
				if err := b.Run(func() error { return b.AttentionWith(out, q, kv, 0, opt, st) }); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				got := tensorValues(t, b, out)
				e := relErr32(got, want)
				// Chunks of more than 17 queries without window or soft-cap run on tensor cores
				// for head sizes 64 and 128, with Q, K, V and the probabilities in BF16.
				tol := 1e-4
				if meta.MaxQueryLen > 17 && opt.Window == 0 && opt.Softcap == 0 && (sh.headDim == 64 || sh.headDim == 128) {
					tol = 1e-2
				}
				result(t, "kernel", "attention "+name, fmt.Sprintf("%.2e", e), fmt.Sprintf("vs cpu.AttentionWith, tol %.0e", tol))
				if !(e <= tol) {
					t.Errorf("%s: relative error %.3g against the CPU kernels, over %.0e", name, e, tol)
				}
				if err := b.Run(func() error { return firstErr(b.Free(q), b.Free(out)) }); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestKVQuantBlocks: CopyBlocks copies a quantized block's codes and scales (the bytes of
// the copy read back as the source's, the other blocks keep theirs), and a quantized
// cache refuses attention mass (h2o, snapkv) with an error naming its type.
func TestKVQuantBlocks(t *testing.T) {
	b := openBackend(t, BackendOptions{})
	r := rand.New(rand.NewPCG(7, 8))
	spec := backend.KVSpec{Layers: 2, NumBlocks: 6, BlockSize: 16, KVHeads: 2, HeadDim: 64, DType: quant.KVFP8E4M3}
	var kv backend.KVCache
	if err := b.Run(func() (err error) { kv, err = b.NewKVCache(spec); return err }); err != nil {
		t.Fatal(err)
	}
	ids := []int32{0, 1, 2, 3, 4, 5}
	data := make([]byte, len(ids)*spec.BlockBytes())
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	back := make([]byte, len(data))
	err := b.Run(func() error {
		return firstErr(b.WriteBlocks(kv, ids, data), b.CopyBlocks(kv, []backend.BlockCopy{{Src: 1, Dst: 4}, {Src: 5, Dst: 0}}),
			b.ReadBlocks(kv, ids, back))
	})
	if err != nil {
		t.Fatal(err)
	}
	per := spec.BlockBytes()
	for i, src := range []int{5, 1, 2, 3, 1, 5} {
		if !bytes.Equal(back[i*per:(i+1)*per], data[src*per:(src+1)*per]) {
			t.Errorf("block %d after the copies: not block %d's bytes", i, src)
		}
	}
	q := putF32(t, b, 1, 4*64, randVals(r, 4*64, 1))
	meta := &backend.StepMeta{Tokens: []int32{1}, Positions: []int32{0}, SlotMapping: []int32{0}, QueryStarts: []int32{0, 1},
		ContextLens: []int32{1}, BlockTables: []int32{0}, MaxBlocks: 1, MaxQueryLen: 1, MaxContextLen: 1}
	st := uploadStep(t, b, meta)
	mass := [][]float32{make([]float32, 1)}
	err = b.Run(func() error { return b.AttentionMass(mass, []int{0}, q, kv, 0, 0.125, st) })
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("fp8_e4m3")) {
		t.Errorf("attention mass over an fp8 cache: %v, want an error naming fp8_e4m3", err)
	}
}

// f32Bytes returns the little-endian bytes of v.
func f32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return out
}

// TestKVQuantDecodeSpeed times decode attention at a 32k-token context on the shapes of an
// 8B Llama (32 query heads over 8 kv heads of 128, one sequence) over a BF16 cache and the
// quantized ones, the types alternated in two rounds: each figure is the median device time
// of 32 calls cycling through 4 layers' caches (more than the L2 holds), reported with the
// cache bytes it reads per second. It checks only that the calls run; the RESULT lines are
// the figures (docs/BENCHMARKS.md).
func TestKVQuantDecodeSpeed(t *testing.T) {
	b := openBackend(t, BackendOptions{})
	const ctx, bs, heads, kvHeads, hd, layers, calls = 32768, 16, 32, 8, 128, 4, 32
	nb := ctx / bs
	meta := &backend.StepMeta{Tokens: []int32{1}, Positions: []int32{ctx - 1}, SlotMapping: []int32{ctx - 1},
		QueryStarts: []int32{0, 1}, ContextLens: []int32{ctx}, MaxBlocks: nb, MaxQueryLen: 1, MaxContextLen: ctx}
	for i := range nb {
		meta.BlockTables = append(meta.BlockTables, int32(i))
	}
	r := rand.New(rand.NewPCG(9, 10))
	q, out := putF32(t, b, 1, heads*hd, randVals(r, heads*hd, 1)), newOut(t, b, 1, heads*hd)
	st := uploadStep(t, b, meta)
	types := []quant.Type{quant.BF16, quant.KVFP8E4M3, quant.KVInt8, quant.KVFP8E5M2}
	caches := map[quant.Type]backend.KVCache{}
	for _, dt := range types {
		caches[dt] = newKV(t, b, backend.KVSpec{Layers: layers, NumBlocks: nb, BlockSize: bs, KVHeads: kvHeads, HeadDim: hd, DType: dt})
	}
	for round := range 2 {
		perCall := map[quant.Type]float64{} // this round's
		for _, dt := range types {
			kv := caches[dt]
			var ms []float64
			err := b.Run(func() error {
				tm, err := b.dev.NewTimer()
				if err != nil {
					return err
				}
				for rep := range 10 { // the first is a warm-up
					if err := b.dev.Start(tm); err != nil {
						return err
					}
					for c := range calls {
						if err := b.Attention(out, q, kv, c%layers, 0.088, st); err != nil {
							return err
						}
					}
					m, err := b.dev.Stop(tm)
					if err != nil {
						return err
					}
					if rep > 0 {
						ms = append(ms, m)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", dt, err)
			}
			slices.Sort(ms)
			us := ms[len(ms)/2] * 1000 / calls
			perCall[dt] = us
			read := float64(kv.Spec().BlockBytes()) / layers * float64(nb) // one layer's cache
			result(t, "bench", fmt.Sprintf("decode attention 32k ctx, 32/8 heads of 128, %s cache, round %d", dt, round+1),
				fmt.Sprintf("%.1f us", us), fmt.Sprintf("%.2f TB/s of cache; %.2fx the bf16 cache's time", read/us/1e6, us/perCall[quant.BF16]))
		}
	}
}
