package cpu

import (
	"math"
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// naiveAttention is the reference twin: for each token and head, a full float64 softmax
// over every visible position, gathered through the block table.
func naiveAttention(q []float32, nTokens, heads int, kv *KVCacheLayer, blockTable, positions []int32, scale float32) []float64 {
	hd := kv.HeadDim
	group := heads / kv.KVHeads
	out := make([]float64, nTokens*heads*hd)
	for t := range nTokens {
		for h := range heads {
			kvh := h / group
			qv := q[(t*heads+h)*hd:][:hd]
			n := int(positions[t]) + 1
			s := make([]float64, n)
			m := math.Inf(-1)
			for j := range n {
				slot := int(blockTable[j/kv.BlockSize])*kv.BlockSize + j%kv.BlockSize
				k := kv.K[(slot*kv.KVHeads+kvh)*hd:][:hd]
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
			o := out[(t*heads+h)*hd:][:hd]
			for j := range n {
				slot := int(blockTable[j/kv.BlockSize])*kv.BlockSize + j%kv.BlockSize
				v := kv.V[(slot*kv.KVHeads+kvh)*hd:][:hd]
				for i := range hd {
					o[i] += s[j] / sum * float64(v[i])
				}
			}
		}
	}
	return out
}

// randomContext returns a random non-contiguous block table for total positions in a cache
// of numBlocks blocks of blockSize, the slot of each position, and random keys and values
// for them ([total][row]).
func randomContext(r *rand.Rand, numBlocks, blockSize, row, total int) (table, slots []int32, k, v []float32) {
	perm := r.Perm(numBlocks)
	table = make([]int32, (total+blockSize-1)/blockSize)
	for i := range table {
		table[i] = int32(perm[i])
	}
	slots = make([]int32, total)
	for p := range total {
		slots[p] = table[p/blockSize]*int32(blockSize) + int32(p%blockSize)
	}
	return table, slots, normals(r, total*row), normals(r, total*row)
}

func TestAttention(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	const blockSize, hd, numBlocks = 4, 16, 32
	pools := testPools(t, 1, 2)
	for _, ratio := range []int{1, 2, 4, 8} {
		kvHeads := 2
		heads := kvHeads * ratio
		// chunk = [start, start+n): a prefill chunk attending to earlier cached blocks, or a
		// decode step (n = 1).
		for _, chunk := range []struct{ start, n int }{{0, 1}, {0, 7}, {5, 20}, {37, 1}, {40, 19}} {
			kv, err := NewKVCacheLayer(numBlocks, blockSize, kvHeads, hd, quant.F32)
			if err != nil {
				t.Fatal(err)
			}
			// Earlier context, then the chunk's own K/V, written by slot.
			row := kvHeads * hd
			table, slots, k, v := randomContext(r, numBlocks, blockSize, row, chunk.start+chunk.n)
			if err := WriteKV(kv, k[:chunk.start*row], v[:chunk.start*row], slots[:chunk.start]); err != nil {
				t.Fatal(err)
			}
			if err := WriteKV(kv, k[chunk.start*row:], v[chunk.start*row:], slots[chunk.start:]); err != nil {
				t.Fatal(err)
			}
			positions := make([]int32, chunk.n)
			for i := range positions {
				positions[i] = int32(chunk.start + i)
			}
			q := normals(r, chunk.n*heads*hd)
			scale := float32(1 / math.Sqrt(hd))
			want := naiveAttention(q, chunk.n, heads, kv, table, positions, scale)
			for _, p := range pools {
				out := make([]float32, len(q))
				if err := Attention(p, out, q, chunk.n, heads, kv, table, positions, scale); err != nil {
					t.Fatal(err)
				}
				for i := range out {
					if math.Abs(float64(out[i])-want[i]) > 1e-5 {
						t.Fatalf("ratio %d chunk %+v %s/%d: out[%d] = %g want %g", ratio, chunk, p.KernelSet(), p.Threads(), i, out[i], want[i])
					}
				}
			}
		}
	}
}

func TestAttentionErrors(t *testing.T) {
	p := testPool(1)
	defer p.Close()
	kv, err := NewKVCacheLayer(2, 4, 2, 8, quant.F32)
	if err != nil {
		t.Fatal(err)
	}
	q := make([]float32, 4*8)
	out := make([]float32, len(q))
	if err := Attention(p, out, q, 1, 3, kv, []int32{0}, []int32{0}, 1); err == nil {
		t.Error("heads not a multiple of kv heads accepted")
	}
	if err := Attention(p, out, q, 1, 4, kv, []int32{0}, []int32{4}, 1); err == nil {
		t.Error("position beyond the block table accepted")
	}
	if err := Attention(p, out, q, 1, 4, kv, []int32{2}, []int32{0}, 1); err == nil {
		t.Error("block beyond the cache accepted")
	}
	if err := WriteKV(kv, make([]float32, 16), make([]float32, 16), []int32{8}); err == nil {
		t.Error("slot beyond the cache accepted")
	}
	if err := WriteKV(kv, make([]float32, 16), make([]float32, 16), []int32{-1}); err != nil {
		t.Errorf("padding slot rejected: %v", err)
	}
	if _, err := NewKVCacheLayer(0, 4, 2, 8, quant.F32); err == nil {
		t.Error("empty cache accepted")
	}
}
