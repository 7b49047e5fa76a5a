package cpu

import (
	"errors"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/kvquant"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

var quantKVTypes = []quant.Type{quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2}

// dequantRows returns x ([n][KVHeads*hd] rows) as a cache of quantized type dt stores it:
// through the reference codec, group by group.
func dequantRows(t *testing.T, dt quant.Type, x []float32, hd int) []float32 {
	c, err := kvquant.NewCodec(dt)
	if err != nil {
		t.Fatal(err)
	}
	g := kvquant.Group(hd)
	codes, scales, out := make([]byte, len(x)), make([]float32, len(x)/g), make([]float32, len(x))
	c.Quantize(codes, scales, x, g)
	c.Dequantize(out, codes, scales, g)
	return out
}

// TestAttentionQuantized checks the quantized caches against their definition: attention
// over an int8 or FP8 cache must equal, bit for bit, attention over an F32 cache holding
// the keys and values the codec reads back — for prefill chunks of several tiles, decodes
// that split their context or give each query head its own unit, and batches, on every
// kernel set, with and without a sliding window and soft-capping, for head dimensions of
// one scale group (8, 16) and of several (64). A check against the naive attention over
// the unquantized values bounds the quantization's effect.
func TestAttentionQuantized(t *testing.T) {
	r := rand.New(rand.NewSource(21))
	const blockSize, numBlocks = 16, 64
	pools := testPools(t, 1, 2)
	for _, dt := range quantKVTypes {
		for _, c := range []struct{ kvHeads, heads, hd, start, n int }{
			{2, 4, 64, 0, 1}, {2, 4, 16, 0, 23}, {1, 4, 8, 37, 19}, {4, 4, 64, 600, 1}, {1, 3, 16, 900, 1}, {2, 6, 64, 300, 1},
		} {
			q8, err := NewKVCacheLayer(numBlocks, blockSize, c.kvHeads, c.hd, dt)
			if err != nil {
				t.Fatal(err)
			}
			f32, _ := NewKVCacheLayer(numBlocks, blockSize, c.kvHeads, c.hd, quant.F32)
			exact, _ := NewKVCacheLayer(numBlocks, blockSize, c.kvHeads, c.hd, quant.F32)
			table, slots, k, v := randomContext(r, numBlocks, blockSize, c.kvHeads*c.hd, c.start+c.n)
			if err := errors.Join(WriteKV(q8, k, v, slots), WriteKV(exact, k, v, slots),
				WriteKV(f32, dequantRows(t, dt, k, c.hd), dequantRows(t, dt, v, c.hd), slots)); err != nil {
				t.Fatal(err)
			}
			positions := make([]int32, c.n)
			for i := range positions {
				positions[i] = int32(c.start + i)
			}
			q := normals(r, c.n*c.heads*c.hd)
			scale := float32(1 / math.Sqrt(float64(c.hd)))
			naive := naiveAttention(q, c.n, c.heads, exact, table, positions, scale)
			frac := map[quant.Type]float64{quant.KVInt8: 0.02, quant.KVFP8E4M3: 0.07, quant.KVFP8E5M2: 0.13}[dt] // of 1+|out|
			for _, p := range pools {
				got, want := make([]float32, len(q)), make([]float32, len(q))
				if err := errors.Join(Attention(p, got, q, c.n, c.heads, q8, table, positions, scale),
					Attention(p, want, q, c.n, c.heads, f32, table, positions, scale)); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s %+v %s/%d: the quantized cache differs from the F32 cache of its values", dt, c, p.KernelSet(), p.Threads())
				}
				// A sliding window with soft-capping takes the same path.
				opt := AttnOptions{Scale: scale, Window: 21, Softcap: 5}
				gw, ww := make([]float32, len(q)), make([]float32, len(q))
				if err := errors.Join(AttentionWith(p, gw, q, c.n, c.heads, q8, table, positions, opt),
					AttentionWith(p, ww, q, c.n, c.heads, f32, table, positions, opt)); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(gw, ww) {
					t.Fatalf("%s %+v %s/%d: windowed, the quantized cache differs from the F32 cache of its values", dt, c, p.KernelSet(), p.Threads())
				}
				for i := range got {
					if math.Abs(float64(got[i])-naive[i]) > frac*(1+math.Abs(naive[i])) {
						t.Fatalf("%s %+v %s/%d: out[%d] = %g, unquantized naive %g", dt, c, p.KernelSet(), p.Threads(), i, got[i], naive[i])
					}
				}
				seqs := []AttentionSeq{
					{Out: make([]float32, len(q)), Q: q, NTokens: c.n, BlockTable: table, ContextIndex: positions},
					{Out: make([]float32, len(q)), Q: q, NTokens: c.n, BlockTable: table, ContextIndex: positions},
				}
				if err := AttentionBatch(p, seqs, c.heads, q8, scale); err != nil {
					t.Fatal(err)
				}
				for _, s := range seqs {
					if !slices.Equal(s.Out, want) {
						t.Fatalf("%s %+v %s/%d: batch output differs from the single sequence's", dt, c, p.KernelSet(), p.Threads())
					}
				}
			}
			// Attention mass reads the same keys (a row per KV head).
			mq, mf := make([]float32, q8.KVHeads*(c.start+c.n)), make([]float32, q8.KVHeads*(c.start+c.n))
			if err := errors.Join(AttentionMass(pools[0], mq, q, c.n, c.heads, q8, table, positions, scale),
				AttentionMass(pools[0], mf, q, c.n, c.heads, f32, table, positions, scale)); err != nil {
				t.Fatal(err)
			}
			for j := range mq {
				if math.Abs(float64(mq[j]-mf[j])) > 1e-5*float64(c.n*c.heads) {
					t.Fatalf("%s %+v: mass[%d] = %g, F32 cache of its values %g", dt, c, j, mq[j], mf[j])
				}
			}
		}
	}
}

// TestQuantizedKVBlocks checks that a quantized layer's blocks copy (copy-on-write) and
// travel through ReadBlock/WriteBlock whole: codes and scales, so that a cache written
// from another's blocks attends identically; and that a buffer of the size of the f16
// layout is refused.
func TestQuantizedKVBlocks(t *testing.T) {
	r := rand.New(rand.NewSource(22))
	const blockSize, kvHeads, hd, numBlocks = 4, 2, 16, 6
	for _, dt := range quantKVTypes {
		src, err := NewKVCacheLayer(numBlocks, blockSize, kvHeads, hd, dt)
		if err != nil {
			t.Fatal(err)
		}
		row := kvHeads * hd
		slots := []int32{0, 1, 2, 3, 4, 5, 6, 7}
		k, v := normals(r, len(slots)*row), normals(r, len(slots)*row)
		if err := WriteKV(src, k, v, slots); err != nil {
			t.Fatal(err)
		}
		if got, want := src.BlockBytes(), blockSize*kvHeads*(hd+4); got != want {
			t.Fatalf("%s: BlockBytes %d, want %d", dt, got, want)
		}
		if err := src.CopyBlock(3, 1); err != nil {
			t.Fatal(err)
		}
		dst, _ := NewKVCacheLayer(numBlocks, blockSize, kvHeads, hd, dt)
		kb, vb := make([]byte, src.BlockBytes()), make([]byte, src.BlockBytes())
		for b := range numBlocks {
			if err := errors.Join(src.ReadBlock(b, kb, vb), dst.WriteBlock(b, kb, vb)); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(src.K8, dst.K8) || !slices.Equal(src.V8, dst.V8) || !slices.Equal(src.KS, dst.KS) || !slices.Equal(src.VS, dst.VS) {
			t.Fatalf("%s: blocks read and written back differ", dt)
		}
		per := blockSize * row
		if !slices.Equal(src.K8[3*per:4*per], src.K8[per:2*per]) || !slices.Equal(src.VS[3*blockSize*kvHeads:4*blockSize*kvHeads], src.VS[blockSize*kvHeads:2*blockSize*kvHeads]) {
			t.Fatalf("%s: block 3 is not a copy of block 1", dt)
		}
		if err := src.ReadBlock(0, make([]byte, 2*per), make([]byte, 2*per)); err == nil {
			t.Errorf("%s: an f16-sized buffer accepted", dt)
		}
	}
}

// TestDequantKernels checks every kernel set's dequantI8 and dequantF8 against kvquant's
// code tables times the scale, bit for bit, over every code byte, strided rows of one and
// of several groups, and groups the SIMD kernels take (multiples of 8) and do not.
func TestDequantKernels(t *testing.T) {
	r := rand.New(rand.NewSource(23))
	for _, c := range []struct{ rows, groups, g, pad int }{
		{1, 1, 8, 0}, {16, 2, 32, 64}, {3, 1, 16, 5}, {5, 1, 7, 3}, {4, 4, 32, 0}, {8, 1, 256, 0},
	} {
		stride := c.groups*c.g + c.pad
		sstride := c.groups + c.pad%3
		src := make([]byte, (c.rows-1)*stride+c.groups*c.g)
		for i := range src {
			src[i] = byte(r.Intn(256))
		}
		if c.g == 256 {
			for i := range 256 {
				src[i] = byte(i)
			}
		}
		scales := make([]float32, (c.rows-1)*sstride+c.groups)
		for i := range scales {
			scales[i] = float32(r.ExpFloat64() * 1e-2)
		}
		n := c.groups * c.g
		for _, dt := range quantKVTypes {
			codec, _ := kvquant.NewCodec(dt)
			want := make([]float32, c.rows*n)
			for row := range c.rows {
				for i := range n {
					want[row*n+i] = codec.Table()[src[row*stride+i]] * scales[row*sstride+i/c.g]
				}
			}
			for _, k := range allKernels() {
				got := make([]float32, c.rows*n)
				if f := codec.FP8(); f != nil {
					shift, mul := f.Widen()
					k.dequantF8(got, src, stride, scales, sstride, c.rows, c.groups, c.g, shift, mul)
				} else {
					k.dequantI8(got, src, stride, scales, sstride, c.rows, c.groups, c.g)
				}
				for i := range got {
					if got[i] != want[i] && !(math.IsNaN(float64(want[i])) || math.IsInf(float64(want[i]), 0)) {
						t.Fatalf("%s %s %+v: value %d reads %g, want %g", k.name, dt, c, i, got[i], want[i])
					}
				}
			}
		}
	}
}
