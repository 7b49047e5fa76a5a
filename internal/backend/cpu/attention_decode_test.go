package cpu

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestAttentionDecodeHeads checks that a decode token's attention, which Attention splits
// into one unit per query head (or, past one fold chunk, into chunk units) when the kv
// heads are few, equals bit for bit the whole-group units that a prefill or a batch of
// sequences runs, for every kernel set and thread count and context lengths inside and
// across cache blocks and fold chunks.
func TestAttentionDecodeHeads(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	const blockSize, kvHeads, heads, hd = 16, 3, 9, 64
	for _, ctx := range []int{1, 7, 16, 17, 100, 160, 256} {
		kv, err := NewKVCacheLayer(16, blockSize, kvHeads, hd, quant.F32)
		if err != nil {
			t.Fatal(err)
		}
		copy(kv.K, normals(r, len(kv.K)))
		copy(kv.V, normals(r, len(kv.V)))
		table := make([]int32, 16)
		for i, b := range r.Perm(16) {
			table[i] = int32(b)
		}
		q := normals(r, heads*hd)
		pos := []int32{int32(ctx - 1)}
		scale := float32(1 / math.Sqrt(hd))
		for _, p := range testPools(t, 1, 2) {
			got := make([]float32, len(q))
			if err := Attention(p, got, q, 1, heads, kv, table, pos, scale); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, len(q))
			a := attnJob{k: p.kern, out: want, q: q, nTokens: 1, heads: heads, kv: kv,
				blockTable: table, ctxIndex: pos, scale: scale, chunk: attnChunkPositions}
			st := p.attnStates.get(heads/kvHeads, hd, blockSize)
			for kvh := range kvHeads {
				a.whole(st, 0, kvh, 0, heads/kvHeads, (ctx-1)/blockSize+1)
				a.finish(st, 0, kvh, 0, heads/kvHeads)
			}
			p.attnStates.put(st)
			if !slices.Equal(got, want) {
				t.Fatalf("ctx %d, %s x%d: per-head units differ from whole-group units", ctx, p.KernelSet(), p.Threads())
			}
		}
	}
}

// TestScaleMax compares scaleMax with a plain loop, NaN and signed zeros included.
func TestScaleMax(t *testing.T) {
	r := rand.New(rand.NewSource(6))
	for n := range 20 {
		sc := normals(r, n)
		if n == 5 {
			sc[2] = float32(math.NaN())
		}
		if n == 6 {
			for i := range sc {
				sc[i] = float32(math.Copysign(0, float64(i%2)-0.5))
			}
		}
		want := slices.Clone(sc)
		wmax := float32(math.Inf(-1))
		for i := range want {
			want[i] *= 0.3
			wmax = max(wmax, want[i])
		}
		got := scaleMax(sc, 0.3)
		same := got == wmax || (got != got && wmax != wmax)
		if !same || math.Signbit(float64(got)) != math.Signbit(float64(wmax)) {
			t.Fatalf("n=%d: max %v, want %v", n, got, wmax)
		}
		for i := range sc {
			if math.Float32bits(sc[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n=%d: sc[%d] = %v, want %v", n, i, sc[i], want[i])
			}
		}
	}
}

// TestPrefetchRows runs every kernel set's prefetchRows over rows that reach, and would
// pass, the end of their slice (strides of float32 and of F16 rows): it must not fault nor
// change the values.
func TestPrefetchRows(t *testing.T) {
	x := f32Bytes(normals(rand.New(rand.NewSource(8)), 1000))
	want := slices.Clone(x)
	for _, k := range allKernels() {
		for _, c := range []struct{ off, stride, rows, n int }{
			{0, 400, 10, 256}, {0, 400, 50, 256}, {3960, 400, 3, 256}, {3996, 0, 4, 4},
			{0, 256, 0, 256}, {20, 40, 3, 0}, {4000, 40, 3, 32}, {1, 2, 2000, 2},
		} {
			k.prefetchRows(x[c.off:], c.stride, c.rows, c.n)
		}
	}
	if !slices.Equal(x, want) {
		t.Fatal("prefetchRows changed its input")
	}
}
