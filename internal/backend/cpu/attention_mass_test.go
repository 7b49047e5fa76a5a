package cpu

import (
	"math"
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// naiveMass is AttentionMass in float64, one score at a time: kvHeads rows of n entries.
func naiveMass(q []float32, nTokens, heads int, kv *KVCacheLayer, blockTable, ctxIndex []int32, scale float32, n int) []float64 {
	hd, group := kv.HeadDim, heads/kv.KVHeads
	mass := make([]float64, kv.KVHeads*n)
	for t := range nTokens {
		for h := range heads {
			qv := q[(t*heads+h)*hd:][:hd]
			c := int(ctxIndex[t]) + 1
			s := make([]float64, c)
			m := math.Inf(-1)
			for j := range c {
				slot := int(blockTable[j/kv.BlockSize])*kv.BlockSize + j%kv.BlockSize
				k := kv.K[(slot*kv.KVHeads+h/group)*hd:][:hd]
				for i := range hd {
					s[j] += float64(qv[i]) * float64(k[i])
				}
				s[j] *= float64(scale)
				m = math.Max(m, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - m)
				sum += s[j]
			}
			for j := range s {
				mass[h/group*n+j] += s[j] / sum
			}
		}
	}
	return mass
}

// TestAttentionMass: the mass of a prefill chunk over a scattered block table matches the
// float64 reference's, each KV head's row apart, each row summing to tokens x the query
// heads of its group, and adds to what mass held; an F16 cache gives the mass of its
// rounded keys.
func TestAttentionMass(t *testing.T) {
	p := testPool(2)
	r := rand.New(rand.NewSource(34))
	const bs, kvHeads, heads, hd, total, nTok = 4, 2, 4, 8, 23, 7
	table, slots, k, v := randomContext(r, 16, bs, kvHeads*hd, total)
	for _, dt := range []quant.Type{quant.F32, quant.F16} {
		kv, err := NewKVCacheLayer(16, bs, kvHeads, hd, dt)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteKV(kv, k, v, slots); err != nil {
			t.Fatal(err)
		}
		ref := kv
		if dt == quant.F16 {
			// The reference reads the rounded keys.
			ref, _ = NewKVCacheLayer(16, bs, kvHeads, hd, quant.F32)
			rk := make([]float32, len(k))
			for i, x := range k {
				rk[i] = quant.F16ToF32(quant.F32ToF16(x))
			}
			WriteKV(ref, rk, v, slots)
		}
		q := make([]float32, nTok*heads*hd)
		for i := range q {
			q[i] = r.Float32()*2 - 1
		}
		ctx := make([]int32, nTok)
		for i := range ctx {
			ctx[i] = int32(total - nTok + i)
		}
		mass := make([]float32, kvHeads*total)
		mass[total+3] = 10
		if err := AttentionMass(p, mass, q, nTok, heads, kv, table, ctx, 0.35); err != nil {
			t.Fatal(err)
		}
		want := naiveMass(q, nTok, heads, ref, table, ctx, 0.35, total)
		want[total+3] += 10
		var sum [kvHeads]float64
		for j, m := range mass {
			if math.Abs(float64(m)-want[j]) > 1e-5 {
				t.Errorf("%s: mass[%d] = %v, want %v", dt, j, m, want[j])
			}
			sum[j/total] += float64(m)
		}
		sum[1] -= 10
		for g, s := range sum {
			if math.Abs(s-nTok*heads/kvHeads) > 1e-4 {
				t.Errorf("%s: kv head %d's mass sums to %v, want %d", dt, g, s, nTok*heads/kvHeads)
			}
		}
	}
	if err := AttentionMass(p, make([]float32, 2*5), make([]float32, heads*hd), 1, heads, mustLayer(t), []int32{1, 2}, []int32{5}, 1); err == nil {
		t.Error("a mass shorter than the context was taken")
	}
	if err := AttentionMass(p, make([]float32, 13), make([]float32, heads*hd), 1, heads, mustLayer(t), []int32{1, 2}, []int32{5}, 1); err == nil {
		t.Error("a mass not divided in rows per kv head was taken")
	}
}

func mustLayer(t *testing.T) *KVCacheLayer {
	kv, err := NewKVCacheLayer(4, 4, 2, 8, quant.F32)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
