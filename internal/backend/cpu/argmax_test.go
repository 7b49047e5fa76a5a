package cpu

import (
	"math"
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/sample"
)

// palette maps a byte to a logit, so that short inputs are full of ties, NaNs, zeros of
// both signs and infinities.
func palette(b byte) float32 {
	switch b % 8 {
	case 0:
		return float32(math.NaN())
	case 1:
		return float32(math.Inf(1))
	case 2:
		return float32(math.Inf(-1))
	case 3:
		return float32(math.Copysign(0, -1))
	}
	return float32(int(b/8)%5) - 2
}

// maskedGreedy is the masked argmax by sample.Greedy over the allowed tokens alone: 0 when
// none of them has a logit other than NaN.
func maskedGreedy(logits []float32, mask []uint32) int {
	var ids []int
	var kept []float32
	for i, v := range logits {
		if mask == nil || (i/32 < len(mask) && mask[i/32]>>(i%32)&1 != 0) {
			ids, kept = append(ids, i), append(kept, v)
		}
	}
	for _, v := range kept {
		if v == v {
			return ids[sample.Greedy(kept)]
		}
	}
	return 0
}

// checkArgmax compares Argmax and ArgmaxMasked with sample.Greedy, unmasked and under mask.
func checkArgmax(t *testing.T, logits []float32, mask []uint32) {
	t.Helper()
	if got, want := Argmax(logits), sample.Greedy(logits); got != want {
		t.Fatalf("Argmax(%v) = %d, sample.Greedy %d", logits, got, want)
	}
	if got, want := ArgmaxMasked(logits, nil), sample.Greedy(logits); got != want {
		t.Fatalf("ArgmaxMasked(%v, nil) = %d, sample.Greedy %d", logits, got, want)
	}
	if len(logits) == 0 {
		return
	}
	if got, want := ArgmaxMasked(logits, mask), maskedGreedy(logits, mask); got != want {
		t.Fatalf("ArgmaxMasked(%v, mask %x) = %d, greedy over the allowed tokens %d", logits, mask, got, want)
	}
}

// TestArgmaxMasked: Argmax picks what sample.Greedy picks (lowest id on ties, NaN only when
// all are NaN) on edge cases and on random rows, and ArgmaxMasked what Greedy picks among
// the allowed tokens, 0 when none is allowed.
func TestArgmaxMasked(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		logits []float32
		mask   []uint32
		want   int
	}{
		{[]float32{1, 3, 3, 2}, nil, 1},
		{[]float32{nan, nan, -1, nan}, nil, 2},
		{[]float32{nan, nan}, nil, 0},
		{[]float32{-inf, -inf, -inf}, nil, 0},
		{[]float32{0, float32(math.Copysign(0, -1)), inf, inf}, nil, 2},
		{[]float32{5, 1, 4, 4}, []uint32{0b1100}, 2},
		{[]float32{5, 1, 4, 4}, []uint32{0}, 0},
		{[]float32{5, nan, 4}, []uint32{0b010}, 0},
		{[]float32{}, []uint32{1}, -1},
	} {
		if got := ArgmaxMasked(c.logits, c.mask); got != c.want {
			t.Errorf("ArgmaxMasked(%v, %x) = %d, want %d", c.logits, c.mask, got, c.want)
		}
		checkArgmax(t, c.logits, c.mask)
	}
	r := rand.New(rand.NewSource(3))
	for range 200 {
		n := 1 + r.Intn(300)
		logits := normals(r, n)
		if r.Intn(2) == 0 {
			for i := range logits {
				logits[i] = palette(byte(r.Intn(256)))
			}
		}
		mask := make([]uint32, (n+31)/32)
		for i := range mask {
			mask[i] = r.Uint32() & r.Uint32() // about a quarter allowed
		}
		checkArgmax(t, logits, mask)
	}
}

// TestArgmaxRows: every row gets its own mask's argmax, whatever the pool; bad shapes and
// masks of the wrong length are errors.
func TestArgmaxRows(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	const rows, vocab = 37, 1000
	logits := normals(r, rows*vocab)
	masks := make([][]uint32, rows)
	for i := range masks {
		if i%3 == 0 {
			continue // unmasked rows between masked ones
		}
		masks[i] = make([]uint32, (vocab+31)/32)
		for j := range masks[i] {
			masks[i][j] = r.Uint32()
		}
	}
	for _, p := range testPools(t, 1, 3) {
		for _, ms := range [][][]uint32{nil, masks} {
			dst := make([]int32, rows)
			if err := ArgmaxRows(p, dst, logits, vocab, ms); err != nil {
				t.Fatal(err)
			}
			for i, id := range dst {
				var m []uint32
				if ms != nil {
					m = ms[i]
				}
				if want := maskedGreedy(logits[i*vocab:(i+1)*vocab], m); int(id) != want {
					t.Fatalf("%s: row %d: id %d, want %d", p.KernelSet(), i, id, want)
				}
			}
		}
		dst := make([]int32, rows)
		if err := ArgmaxRows(p, dst, logits[:vocab], vocab, nil); err == nil {
			t.Error("logits of one row for 37 accepted")
		}
		if err := ArgmaxRows(p, dst, logits, vocab, masks[:2]); err == nil {
			t.Error("2 masks for 37 rows accepted")
		}
		short := append([][]uint32(nil), masks...)
		short[1] = short[1][:3]
		if err := ArgmaxRows(p, dst, logits, vocab, short); err == nil {
			t.Error("a mask of 3 words for 1000 tokens accepted")
		}
	}
}

// FuzzArgmax: Argmax and ArgmaxMasked agree with sample.Greedy on any row of palette
// logits, and ArgmaxMasked with Greedy over the allowed tokens under any mask (masks
// shorter than the row included).
func FuzzArgmax(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 12, 20}, []byte{0xff})
	f.Add([]byte{0, 0, 0}, []byte{})
	f.Add([]byte{9, 9, 17, 9}, []byte{0x0a, 0, 0, 0})
	f.Fuzz(func(t *testing.T, vals, maskBytes []byte) {
		logits := make([]float32, len(vals))
		for i, b := range vals {
			logits[i] = palette(b)
		}
		mask := make([]uint32, len(maskBytes)/4)
		for i := range mask {
			mask[i] = uint32(maskBytes[4*i]) | uint32(maskBytes[4*i+1])<<8 | uint32(maskBytes[4*i+2])<<16 | uint32(maskBytes[4*i+3])<<24
		}
		checkArgmax(t, logits, mask)
	})
}
