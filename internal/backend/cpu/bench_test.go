package cpu

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/kvquant"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// benchWeight returns a rows x cols weight of type wt with random contents of realistic
// magnitude (valid scales, no NaNs), made quickly without running a quantizer.
func benchWeight(r *rand.Rand, wt quant.Type, rows, cols int) Weight {
	w := Weight{Type: wt, Rows: rows, Cols: cols}
	switch wt {
	case quant.F32, quant.F16, quant.BF16:
		w.Data = make([]byte, rows*cols*wt.BlockBytes())
		for i := range rows * cols {
			v := float32(r.NormFloat64()) * 0.02
			switch wt {
			case quant.F32:
				copy(w.Data[4*i:], f32Bytes([]float32{v}))
			case quant.F16:
				binary.LittleEndian.PutUint16(w.Data[2*i:], quant.F32ToF16(v))
			default:
				binary.LittleEndian.PutUint16(w.Data[2*i:], quant.F32ToBF16(v))
			}
		}
	case quant.FP8:
		rb, _ := wt.RowBytes(cols)
		w.Data = make([]byte, rows*rb)
		row := make([]float32, cols)
		for i := range rows {
			for j := range row {
				row[j] = float32(r.NormFloat64()) * 0.02
			}
			_ = quant.Quantize(wt, row, w.Data[i*rb:(i+1)*rb])
		}
	default:
		w.Data = randWeights(r, wt, rows*cols/wt.BlockSize(), modeRandom)
	}
	return w
}

func BenchmarkMatMul(b *testing.B) {
	types := []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K}
	shapes := []struct{ rows, cols int }{{2048, 2048}, {5632, 2048}, {2048, 5632}}
	r := rand.New(rand.NewSource(1))
	for _, ks := range KernelSets() {
		p, err := NewPoolKernels(2, ks)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		for _, wt := range types {
			for _, sh := range shapes {
				for _, tokens := range []int{1, 128} {
					name := fmt.Sprintf("%s/%s/%dx%d/tokens=%d", ks, wt, sh.rows, sh.cols, tokens)
					b.Run(name, func(b *testing.B) {
						w := benchWeight(r, wt, sh.rows, sh.cols)
						x := normals(r, tokens*sh.cols)
						out := make([]float32, tokens*sh.rows)
						b.SetBytes(int64(len(w.Data)))
						for b.Loop() {
							if err := MatMul(p, out, w, x, tokens); err != nil {
								b.Fatal(err)
							}
						}
						flops := 2 * float64(sh.rows) * float64(sh.cols) * float64(tokens) * float64(b.N)
						b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					})
				}
			}
		}
	}
}

// BenchmarkAttentionDecode times one decode token's attention over a 1,024-token context
// in an F32, F16, int8 and FP8 E4M3 cache, cycling through 32 layers' caches (64 MB in F32) so that, as
// in a real decode step, the keys and values come from memory, not from cache. It reports
// the cache bytes read per second and the process's CPU time per call.
func BenchmarkAttentionDecode(b *testing.B) {
	const blockSize, kvHeads, heads, hd, ctx, layers = 16, 4, 32, 64, 1024, 32
	for _, dt := range []quant.Type{quant.F32, quant.F16, quant.KVInt8, quant.KVFP8E4M3} {
		b.Run(dt.String(), func(b *testing.B) {
			r := rand.New(rand.NewSource(2))
			var kvs []*KVCacheLayer
			row := kvHeads * hd
			slots := make([]int32, ctx)
			for i := range slots {
				slots[i] = int32(i)
			}
			for range layers {
				kv, err := NewKVCacheLayer(ctx/blockSize, blockSize, kvHeads, hd, dt)
				if err != nil {
					b.Fatal(err)
				}
				if err := WriteKV(kv, normals(r, ctx*row), normals(r, ctx*row), slots); err != nil {
					b.Fatal(err)
				}
				kvs = append(kvs, kv)
			}
			table := make([]int32, ctx/blockSize)
			for i := range table {
				table[i] = int32(i)
			}
			q := normals(r, heads*hd)
			out := make([]float32, len(q))
			p := testPool(2)
			defer p.Close()
			l := 0
			c0 := processCPU()
			for b.Loop() {
				if err := Attention(p, out, q, 1, heads, kvs[l], table, []int32{ctx - 1}, 0.125); err != nil {
					b.Fatal(err)
				}
				l = (l + 1) % layers
			}
			bytes := float64(2*ctx*kvHeads*kvquant.RowBytes(dt, hd)) * float64(b.N)
			b.ReportMetric(bytes/b.Elapsed().Seconds()/1e9, "GB/s")
			// CPU time (of the process, the pool's spinning threads included) is steadier
			// than wall time on a shared machine.
			b.ReportMetric(float64(processCPU()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkAttentionPrefill times the attention of a 256-token prefill chunk at the end of
// a 2,048-token context (smollm2's 9 heads over 3 kv heads of 64), in an F32 and an F16
// cache, and reports GFLOP/s of its score and weighted-sum products.
func BenchmarkAttentionPrefill(b *testing.B) {
	const blockSize, kvHeads, heads, hd, ctx, n = 16, 3, 9, 64, 2048, 256
	for _, dt := range []quant.Type{quant.F32, quant.F16} {
		b.Run(dt.String(), func(b *testing.B) {
			r := rand.New(rand.NewSource(3))
			kv, err := NewKVCacheLayer(ctx/blockSize, blockSize, kvHeads, hd, dt)
			if err != nil {
				b.Fatal(err)
			}
			table, slots, k, v := randomContext(r, ctx/blockSize, blockSize, kvHeads*hd, ctx)
			if err := WriteKV(kv, k, v, slots); err != nil {
				b.Fatal(err)
			}
			positions := make([]int32, n)
			var pairs float64 // (query, key) pairs
			for i := range positions {
				positions[i] = int32(ctx - n + i)
				pairs += float64(positions[i] + 1)
			}
			q := normals(r, n*heads*hd)
			out := make([]float32, len(q))
			p := testPool(2)
			defer p.Close()
			for b.Loop() {
				if err := Attention(p, out, q, n, heads, kv, table, positions, 0.125); err != nil {
					b.Fatal(err)
				}
			}
			flops := 4 * pairs * heads * hd * float64(b.N)
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkProbeBandwidth(b *testing.B) {
	p := testPool(2)
	defer p.Close()
	var gbs float64
	for b.Loop() {
		gbs = ProbeBandwidth(p, 256<<20)
	}
	b.ReportMetric(gbs, "GB/s")
}

func TestProbeBandwidth(t *testing.T) {
	p := testPool(2)
	defer p.Close()
	if g := ProbeBandwidth(p, 4<<20); g <= 0 {
		t.Fatalf("ProbeBandwidth = %g GB/s", g)
	}
	if g := ProbeBandwidth(p, 10); g != 0 {
		t.Fatalf("ProbeBandwidth(10 bytes) = %g, want 0", g)
	}
}

// BenchmarkDot times each quantized dot kernel on one 4096-element row (L1-resident).
func BenchmarkDot(b *testing.B) {
	r := rand.New(rand.NewSource(3))
	for _, k := range allKernels() {
		for _, c := range quantCases {
			nb := 4096 / c.wt.BlockSize()
			w := randWeights(r, c.wt, nb, modeRandom)
			x := randActivations(r, c.xt, nb, modeRandom)
			dot := c.kernel(k)
			b.Run(k.name+"/"+c.name, func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				var s float32
				for b.Loop() {
					s += dot(w, x, nb)
				}
				_ = s
			})
		}
	}
}
