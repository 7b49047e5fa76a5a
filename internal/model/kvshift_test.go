package model

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// prefillAt runs tokens as one prefill chunk of a sequence over table, its i-th token
// rotated as at position pos0+i and cached at context index i.
func prefillAt(t *testing.T, m *Model, kv *KVCache, table []int32, tokens []int32, pos0 int) {
	t.Helper()
	bs := kv.BlockSize
	b := &Batch{Seqs: []Seq{{BlockTable: table, QueryLen: len(tokens), ContextLen: len(tokens)}}}
	for i, tok := range tokens {
		b.Tokens = append(b.Tokens, tok)
		b.Positions = append(b.Positions, int32(pos0+i))
		b.SlotMapping = append(b.SlotMapping, table[i/bs]*int32(bs)+int32(i%bs))
	}
	if _, err := m.Forward(b, kv); err != nil {
		t.Fatal(err)
	}
}

// TestShiftKeys: a context computed at positions d, d+1, ... whose keys ShiftKeys rotates
// by -d decodes the next token as the same context computed at 0, 1, ... does, up to
// rounding (attention depends on positions only through q-k rotations, and the values
// do not depend on positions at all); left unshifted it decodes otherwise. Interleaved
// and NeoX RoPE, GQA, F32, F16, int8 and FP8 caches, a model split by tensor.
func TestShiftKeys(t *testing.T) {
	const bs, n = 4, 10
	tokens := testTokens(n)
	for name, fm := range positionShapes(t) {
		for _, tc := range []struct {
			p  Parallel
			dt quant.Type
		}{{Parallel{1, 1}, quant.F32}, {Parallel{1, 1}, quant.F16}, {Parallel{2, 1}, quant.F32},
			{Parallel{1, 1}, quant.KVInt8}, {Parallel{1, 1}, quant.KVFP8E4M3}} {
			t.Run(fmt.Sprintf("%s/tp%d/%s", name, tc.p.Tensor, tc.dt), func(t *testing.T) {
				m := cpuModel(t, fm, tc.p, tc.dt)
				kv, err := m.NewKVCache(12, bs)
				if err != nil {
					t.Fatal(err)
				}
				plain, moved := []int32{1, 2, 3}, []int32{7, 4, 9}
				prefillAt(t, m, kv, plain, tokens, 0)
				want := decodeAt(t, m, kv, plain, 77, n)
				for _, d := range []int{16, 300} {
					prefillAt(t, m, kv, moved, tokens, d)
					unshifted := decodeAt(t, m, kv, moved, 77, n)
					prefillAt(t, m, kv, moved, tokens, d) // the decode wrote slot n
					if err := kv.ShiftKeys(moved, -d); err != nil {
						t.Fatal(err)
					}
					got := decodeAt(t, m, kv, moved, 77, n)
					// F16 keys are rounded at their first position and again after the
					// rotation: a few half-precision ulps.
					// Quantized keys are quantized again after the rotation, each vector
					// with a new scale: a second rounding of their codes.
					tol := map[quant.Type]float64{quant.F32: 5e-5, quant.F16: 2e-3, quant.KVInt8: 2e-2, quant.KVFP8E4M3: 8e-2}[tc.dt]
					e := relErr([][]float32{got}, [][]float32{want})
					if e > tol {
						t.Errorf("shift %d: logits %.3g from the unshifted context's (relative), allowed %g", d, e, tol)
					}
					if u := relErr([][]float32{unshifted}, [][]float32{want}); u < 10*e || u < 1e-3 {
						t.Errorf("shift %d: without the shift the logits are %.3g apart, with it %.3g: the test shows nothing", d, u, e)
					}
				}
				if err := kv.ShiftKeys([]int32{99}, 1); err == nil {
					t.Error("a shift of a block outside the cache was taken")
				}
			})
		}
	}
}

// TestAttentionMassForward: a step's attention mass, asked for a sequence's tokens from
// its MassFrom-th, sums to layers x heads x those tokens (each head's probabilities sum to
// 1), is added to what the buffer held, leaves the logits as they are, and is refused by a
// split model.
func TestAttentionMassForward(t *testing.T) {
	const bs = 4
	tokens := testTokens(11)
	fm := positionShapes(t)["qwen2.5-0.5b"]
	c := fm.Config
	run := func(m *Model, mass []float32) ([]float32, error) {
		kv, err := m.NewKVCache(8, bs)
		if err != nil {
			t.Fatal(err)
		}
		table := []int32{5, 2, 7}
		b := &Batch{Seqs: []Seq{{BlockTable: table, QueryLen: len(tokens), ContextLen: len(tokens), Mass: mass, MassFrom: 3}}, LogitsIndices: []int{10}}
		for i, tok := range tokens {
			b.Tokens, b.Positions = append(b.Tokens, tok), append(b.Positions, int32(i))
			b.SlotMapping = append(b.SlotMapping, table[i/bs]*bs+int32(i%bs))
		}
		return m.Forward(b, kv)
	}
	m := cpuModel(t, fm, Parallel{1, 1}, quant.F32)
	lanes := m.AttentionMassLanes()
	if lanes != c.Layers*c.KVHeads {
		t.Fatalf("%d mass lanes, want layers x kv heads = %d", lanes, c.Layers*c.KVHeads)
	}
	const stride = 12 // a row longer than the context: entry 11 of each is left as it is
	mass := make([]float32, lanes*stride)
	for g := range lanes {
		mass[g*stride+11] = 5
	}
	got, err := run(m, mass)
	if err != nil {
		t.Fatal(err)
	}
	want, err := run(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr([][]float32{got}, [][]float32{want}); e != 0 {
		t.Errorf("asking for mass changed the logits by %.3g", e)
	}
	// Each layer's KV head's row sums to the queries times its group's query heads.
	w := float64(c.Heads / c.KVHeads * (len(tokens) - 3))
	for g := range lanes {
		row := mass[g*stride:][:stride]
		var sum float64
		for _, x := range row[:11] {
			sum += float64(x)
		}
		if math.Abs(sum-w) > 1e-3*w || row[11] != 5 {
			t.Errorf("row %d: mass sums to %v (entry 11: %v), want %v", g, sum, row[11], w)
		}
		if row[10] == 0 || row[0] == 0 {
			t.Errorf("row %d: mass %v: entries the queries attend to hold none", g, row)
		}
	}
	// The heads do not all attend alike: the rows differ.
	if slices.Equal(mass[:stride], mass[stride:2*stride]) {
		t.Errorf("kv heads 0 and 1 of layer 0 got the same mass %v", mass[:stride])
	}
	if _, err := run(m, make([]float32, lanes*stride+1)); err == nil {
		t.Error("a mass not divided into rows per layer and kv head was taken")
	}
	if _, err := run(m, make([]float32, lanes*10)); err == nil {
		t.Error("rows of mass shorter than the context were taken")
	}
	split := cpuModel(t, fm, Parallel{2, 1}, quant.F32)
	if _, err := run(split, make([]float32, lanes*11)); err == nil {
		t.Error("a split model took a mass request")
	}
}

// TestCompactKeys: closing gaps over evicted slots moves each kept slot's key and value to
// its new place with its key rotated there. A layer-0 key and value depend on the token and
// its position alone, so they must equal those a prefill of the kept tokens alone writes at
// their new positions; evicting a whole block must give what Drop and ShiftKeys give, bit
// for bit. Interleaved and NeoX RoPE, GQA, F32 and F16 caches, a model split by tensor.
func TestCompactKeys(t *testing.T) {
	const bs, n = 4, 11
	tokens := testTokens(n)
	evict := map[int]bool{2: true, 3: true, 6: true, 9: true}
	var keep []int
	var kept []int32
	for i := range n {
		if !evict[i] {
			keep, kept = append(keep, i), append(kept, tokens[i])
		}
	}
	for name, fm := range positionShapes(t) {
		for _, tc := range []struct {
			p  Parallel
			dt quant.Type
		}{{Parallel{1, 1}, quant.F32}, {Parallel{1, 1}, quant.F16}, {Parallel{2, 1}, quant.F32}} {
			t.Run(fmt.Sprintf("%s/tp%d/%s", name, tc.p.Tensor, tc.dt), func(t *testing.T) {
				m := cpuModel(t, fm, tc.p, tc.dt)
				kv, err := m.NewKVCache(16, bs)
				if err != nil {
					t.Fatal(err)
				}
				read := func(blocks []int32) []byte {
					buf := make([]byte, len(blocks)*kv.BlockBytes())
					if err := kv.ReadBlocks(blocks, buf); err != nil {
						t.Fatal(err)
					}
					return buf
				}
				src, dst, ref := []int32{3, 8, 1}, []int32{5, 10}, []int32{12, 13}
				prefillAt(t, m, kv, src, tokens, 0)
				prefillAt(t, m, kv, ref, kept, 0)
				if err := kv.CompactKeys(read(src), [][]int{keep}, dst); err != nil {
					t.Fatal(err)
				}
				got, want := read(dst), read(ref)
				// Layer 0 of every rank: the first 2 x BlockSize slots of each rank's part.
				off, moved := 0, 0
				for r := range kv.parts {
					spec := kv.parts[r].Spec()
					eb := spec.DType.BlockBytes()
					slot := spec.KVHeads * spec.HeadDim * eb
					for b := range dst {
						for kvPart := range 2 { // keys, then values
							for s := range bs {
								if i := b*bs + s; i >= len(keep) || i == keep[i] && kvPart == 0 {
									continue
								}
								at := b*kv.BlockBytes() + off + (kvPart*bs+s)*slot
								g, w := decode(got[at:at+slot], spec.DType), decode(want[at:at+slot], spec.DType)
								tol := map[quant.Type]float64{quant.F32: 1e-5, quant.F16: 2e-3}[tc.dt]
								if e := maxRel(g, w); e > tol {
									t.Errorf("rank %d block %d slot %d (k/v %d): %.3g from the kept tokens' own prefill", r, b, s, kvPart, e)
								}
								moved++
							}
						}
					}
					off += spec.BlockBytes()
				}
				if moved == 0 {
					t.Fatal("nothing compared")
				}
				// A whole block: the same as Drop + ShiftKeys.
				prefillAt(t, m, kv, src, tokens, 0)
				whole := []int{0, 1, 2, 3, 8, 9, 10}
				if err := kv.CompactKeys(read(src), [][]int{whole}, dst); err != nil {
					t.Fatal(err)
				}
				compacted := read(dst)
				if err := kv.ShiftKeys(src[2:], -bs); err != nil {
					t.Fatal(err)
				}
				shifted := append(read(src[:1]), read(src[2:])...)
				for i := range compacted {
					// The last block's slots past the kept ones are zeroed by CompactKeys.
					if compacted[i] != shifted[i] && !zeroTail(kv, i, len(whole)) {
						t.Fatalf("byte %d: compacting a whole block differs from a shift", i)
					}
				}
				if err := kv.CompactKeys(read(src), [][]int{{1, 0}}, dst[:1]); err == nil {
					t.Error("slots out of order were taken")
				}
				lanes := kv.massLanes()
				if tc.p.Tensor > 1 {
					if err := kv.CompactKeys(read(src), slices.Repeat([][]int{keep}, lanes), dst); err == nil {
						t.Error("lists per layer and kv head were taken by a split model")
					}
					return
				}
				// A list per layer and KV head: each head's rows are those the compaction of
				// its own list alone writes.
				other := []int{0, 2, 3, 6, 7, 8, 9} // slots 1, 4, 5 and 10 go
				prefillAt(t, m, kv, src, tokens, 0)
				lists := make([][]int, lanes)
				for h := range lists {
					lists[h] = [][]int{keep, other}[h%3%2]
				}
				if err := kv.CompactKeys(read(src), lists, dst); err != nil {
					t.Fatal(err)
				}
				perHead := read(dst)
				byList := map[int][]byte{}
				for i, l := range [][]int{keep, other} {
					if err := kv.CompactKeys(read(src), [][]int{l}, dst); err != nil {
						t.Fatal(err)
					}
					byList[i] = read(dst)
				}
				spec := kv.parts[0].Spec()
				row := spec.HeadDim * spec.DType.BlockBytes()
				for i := range perHead {
					in := i % kv.BlockBytes() / row // which head row of the block
					h := in/(2*bs*spec.KVHeads)*spec.KVHeads + in%spec.KVHeads
					if perHead[i] != byList[h%3%2][i] {
						t.Fatalf("byte %d (layer %d, kv head %d): not what compacting its own list gives", i, h/spec.KVHeads, h%spec.KVHeads)
					}
				}
				if slices.Equal(byList[0], byList[1]) || slices.Equal(perHead, byList[0]) || slices.Equal(perHead, byList[1]) {
					t.Error("the lists compact alike: the comparison shows nothing")
				}
				if err := kv.CompactKeys(read(src), append(lists[:lanes-1:lanes-1], keep[1:]), dst); err == nil {
					t.Error("lists of different lengths were taken")
				}
				if err := kv.CompactKeys(read(src), lists[:lanes-1], dst); err == nil && lanes > 2 {
					t.Error("fewer lists than layers x kv heads were taken")
				}
			})
		}
	}
}

// zeroTail reports whether byte i of blocks in the host layout lies in a slot at or past
// the kept-th.
func zeroTail(kv *KVCache, i, kept int) bool {
	bb := kv.BlockBytes()
	b, in := i/bb, i%bb
	for _, p := range kv.parts {
		spec := p.Spec()
		per := spec.BlockBytes()
		if in < per {
			slot := spec.KVHeads * spec.HeadDim * spec.DType.BlockBytes()
			s := in % (kv.BlockSize * slot) / slot
			return b*kv.BlockSize+s >= kept
		}
		in -= per
	}
	return false
}

// decode reads elements of dt.
func decode(b []byte, dt quant.Type) []float32 {
	out := make([]float32, len(b)/dt.BlockBytes())
	for i := range out {
		switch dt {
		case quant.F32:
			out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
		default:
			out[i] = quant.F16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
		}
	}
	return out
}

// maxRel returns the largest |a-b| over the largest |b|.
func maxRel(a, b []float32) float64 {
	var d, s float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
		s = max(s, math.Abs(float64(b[i])))
	}
	return d / max(s, 1e-30)
}
