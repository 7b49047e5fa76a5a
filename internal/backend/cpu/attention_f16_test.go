package cpu

import (
	"errors"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// roundF16 returns x rounded to half precision, as an F16 cache stores it.
func roundF16(x []float32) []float32 {
	r := make([]float32, len(x))
	for i, v := range x {
		r[i] = quant.F16ToF32(quant.F32ToF16(v))
	}
	return r
}

// TestAttentionF16 checks the F16 cache against its definition: attention over an F16
// cache must equal, bit for bit, attention over an F32 cache holding the same keys and
// values rounded to half precision — for prefill chunks, single decodes that split their
// context (flash-decoding) or give each query head its own unit, and batches, on every
// kernel set. A first check against the naive attention over the unrounded values bounds
// the rounding's effect.
func TestAttentionF16(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	const blockSize, hd, numBlocks = 16, 32, 64
	pools := testPools(t, 1, 2)
	for _, c := range []struct{ kvHeads, heads, start, n int }{
		{2, 4, 0, 1}, {2, 4, 0, 23}, {1, 4, 37, 19}, {4, 4, 600, 1}, {1, 3, 900, 1}, {2, 6, 300, 1},
	} {
		f16, err := NewKVCacheLayer(numBlocks, blockSize, c.kvHeads, hd, quant.F16)
		if err != nil {
			t.Fatal(err)
		}
		f32, err := NewKVCacheLayer(numBlocks, blockSize, c.kvHeads, hd, quant.F32)
		if err != nil {
			t.Fatal(err)
		}
		table, slots, k, v := randomContext(r, numBlocks, blockSize, c.kvHeads*hd, c.start+c.n)
		if err := WriteKV(f16, k, v, slots); err != nil {
			t.Fatal(err)
		}
		exact, err := NewKVCacheLayer(numBlocks, blockSize, c.kvHeads, hd, quant.F32)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(WriteKV(f32, roundF16(k), roundF16(v), slots), WriteKV(exact, k, v, slots)); err != nil {
			t.Fatal(err)
		}
		positions := make([]int32, c.n)
		for i := range positions {
			positions[i] = int32(c.start + i)
		}
		q := normals(r, c.n*c.heads*hd)
		scale := float32(1 / math.Sqrt(hd))
		naive := naiveAttention(q, c.n, c.heads, exact, table, positions, scale)
		for _, p := range pools {
			got, want := make([]float32, len(q)), make([]float32, len(q))
			if err := errors.Join(Attention(p, got, q, c.n, c.heads, f16, table, positions, scale),
				Attention(p, want, q, c.n, c.heads, f32, table, positions, scale)); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if math.Abs(float64(got[i])-naive[i]) > 2e-3 {
					t.Fatalf("%+v %s/%d: out[%d] = %g, unrounded naive %g", c, p.KernelSet(), p.Threads(), i, got[i], naive[i])
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%+v %s/%d: F16 cache differs from the F32 cache of rounded values", c, p.KernelSet(), p.Threads())
			}
			// The same sequence twice in one batch (a decode step of two sequences sharing a
			// prefix) takes AttentionBatch's one-loop path.
			seqs := []AttentionSeq{{Out: make([]float32, len(q)), Q: q, NTokens: c.n, BlockTable: table, ContextIndex: positions}}
			seqs = append(seqs, AttentionSeq{Out: make([]float32, len(q)), Q: q, NTokens: c.n, BlockTable: table, ContextIndex: positions})
			if err := AttentionBatch(p, seqs, c.heads, f16, scale); err != nil {
				t.Fatal(err)
			}
			for _, s := range seqs {
				for i := range s.Out {
					if math.Abs(float64(s.Out[i])-float64(want[i])) > 1e-5 {
						t.Fatalf("%+v %s/%d: batch out[%d] = %g, single %g", c, p.KernelSet(), p.Threads(), i, s.Out[i], want[i])
					}
				}
			}
		}
	}
}

// TestKVCacheLayerCopyBlock checks copy-on-write of F32 and F16 blocks and that another
// element type or a block outside the cache is refused.
func TestKVCacheLayerCopyBlock(t *testing.T) {
	r := rand.New(rand.NewSource(12))
	for _, dt := range []quant.Type{quant.F32, quant.F16} {
		kv, err := NewKVCacheLayer(3, 2, 2, 8, dt)
		if err != nil {
			t.Fatal(err)
		}
		row := 2 * 8
		k, v := normals(r, 6*row), normals(r, 6*row)
		if err := WriteKV(kv, k, v, []int32{0, 1, 2, 3, 4, 5}); err != nil {
			t.Fatal(err)
		}
		if err := kv.CopyBlock(2, 0); err != nil {
			t.Fatal(err)
		}
		for _, s := range []int{0, 1} {
			got, want := slotValues(kv, 4+s), slotValues(kv, s)
			if !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
				t.Fatalf("%s: block 2 slot %d is not a copy of block 0", dt, s)
			}
		}
		if !slices.Equal(slotValues(kv, 2)[0], roundTo(dt, k[2*row:3*row])) {
			t.Fatalf("%s: block 1 changed", dt)
		}
		if err := kv.CopyBlock(3, 0); err == nil {
			t.Errorf("%s: copy to block 3 of 3 accepted", dt)
		}
	}
	if _, err := NewKVCacheLayer(3, 2, 2, 8, quant.Q8_0); err == nil {
		t.Error("a q8_0 cache accepted")
	}
}

// slotValues returns the keys and values at slot s of kv as float32.
func slotValues(kv *KVCacheLayer, s int) [2][]float32 {
	row := kv.KVHeads * kv.HeadDim
	if kv.DType == quant.F32 {
		return [2][]float32{slices.Clone(kv.K[s*row:][:row]), slices.Clone(kv.V[s*row:][:row])}
	}
	var out [2][]float32
	for i, b := range [][]byte{kv.K16, kv.V16} {
		out[i] = make([]float32, row)
		genericKernels().cvtF16(out[i], b[2*s*row:])
	}
	return out
}

// roundTo returns x as a cache of dtype stores it.
func roundTo(dt quant.Type, x []float32) []float32 {
	if dt == quant.F16 {
		return roundF16(x)
	}
	return slices.Clone(x)
}
