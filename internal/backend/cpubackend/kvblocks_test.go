package cpubackend

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// blockSpec is the small cache geometry of the block tests.
func blockSpec(dt quant.Type) backend.KVSpec {
	return backend.KVSpec{Layers: 2, NumBlocks: 5, BlockSize: 2, KVHeads: 2, HeadDim: 3, DType: dt}
}

// kvValue is the test's value of element d of kv head h at slot s of layer l, keys
// (part 0) or values (part 1): distinct for every element, exact in F16.
func kvValue(l, part, s, h, d int) float32 {
	return float32((((l*2+part)*10+s)*2+h)*3+d) / 8
}

// filledCache makes a cache of spec whose every slot holds kvValue, written by cpu.WriteKV.
func filledCache(t *testing.T, b *Backend, spec backend.KVSpec) backend.KVCache {
	t.Helper()
	kv, err := b.NewKVCache(spec)
	if err != nil {
		t.Fatal(err)
	}
	row := spec.KVHeads * spec.HeadDim
	slots := spec.NumBlocks * spec.BlockSize
	for l, layer := range kv.(*kvCache).layers {
		k, v := make([]float32, slots*row), make([]float32, slots*row)
		mapping := make([]int32, slots)
		for s := range slots {
			mapping[s] = int32(s)
			for h := range spec.KVHeads {
				for d := range spec.HeadDim {
					k[s*row+h*spec.HeadDim+d] = kvValue(l, 0, s, h, d)
					v[s*row+h*spec.HeadDim+d] = kvValue(l, 1, s, h, d)
				}
			}
		}
		if err := cpu.WriteKV(layer, k, v, mapping); err != nil {
			t.Fatal(err)
		}
	}
	return kv
}

// TestReadBlocksLayout: ReadBlocks lays blocks out as backend.KVSpec documents (block
// after block as asked, layer after layer, keys then values, slot after slot, head after
// head, little-endian elements of the cache's type), for F32 and F16 caches.
func TestReadBlocksLayout(t *testing.T) {
	b := newBackend(t)
	for _, dt := range []quant.Type{quant.F32, quant.F16} {
		spec := blockSpec(dt)
		kv := filledCache(t, b, spec)
		blocks := []int32{3, 0, 3}
		elem := map[quant.Type]int{quant.F32: 4, quant.F16: 2}[dt]
		blockBytes := 2 * 2 * 2 * 2 * 3 * elem
		if got := spec.BlockBytes(); got != blockBytes {
			t.Fatalf("%s: BlockBytes %d, want %d", dt, got, blockBytes)
		}
		dst := make([]byte, len(blocks)*blockBytes)
		if err := b.ReadBlocks(kv, blocks, dst); err != nil {
			t.Fatal(err)
		}
		off := 0
		for _, blk := range blocks {
			for l := range 2 {
				for part := range 2 {
					for o := range 2 {
						for h := range 2 {
							for d := range 3 {
								want := kvValue(l, part, int(blk)*2+o, h, d)
								var got float32
								if dt == quant.F16 {
									got = quant.F16ToF32(binary.LittleEndian.Uint16(dst[off:]))
								} else {
									got = math.Float32frombits(binary.LittleEndian.Uint32(dst[off:]))
								}
								if got != want {
									t.Fatalf("%s: block %d layer %d part %d slot %d head %d dim %d: %g, want %g", dt, blk, l, part, o, h, d, got, want)
								}
								off += elem
							}
						}
					}
				}
			}
		}
	}
}

// TestBlocksRoundTrip: blocks read and written to other blocks read back the same bytes,
// leave the other blocks alone, and a block named twice takes the later bytes; bad ids,
// buffer sizes and caches are errors.
func TestBlocksRoundTrip(t *testing.T) {
	b := newBackend(t)
	for _, dt := range []quant.Type{quant.F32, quant.F16, quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2} {
		spec := blockSpec(dt)
		kv := filledCache(t, b, spec)
		per := spec.BlockBytes()
		src := make([]byte, 2*per)
		if err := b.ReadBlocks(kv, []int32{0, 1}, src); err != nil {
			t.Fatal(err)
		}
		keep := make([]byte, per)
		if err := b.ReadBlocks(kv, []int32{2}, keep); err != nil {
			t.Fatal(err)
		}
		if err := b.WriteBlocks(kv, []int32{3, 4}, src); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 3*per)
		if err := b.ReadBlocks(kv, []int32{3, 4, 2}, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:2*per], src) || !bytes.Equal(got[2*per:], keep) {
			t.Errorf("%s: blocks written to 3 and 4 do not read back, or block 2 changed", dt)
		}
		if err := b.WriteBlocks(kv, []int32{4, 4}, src); err != nil {
			t.Fatal(err)
		}
		if err := b.ReadBlocks(kv, []int32{4}, got[:per]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:per], src[per:]) {
			t.Errorf("%s: a block written twice does not hold the later bytes", dt)
		}
		for name, err := range map[string]error{
			"negative id":  b.ReadBlocks(kv, []int32{-1}, got[:per]),
			"id past end":  b.WriteBlocks(kv, []int32{5}, got[:per]),
			"short buffer": b.ReadBlocks(kv, []int32{1, 2}, got[:per]),
			"long buffer":  b.WriteBlocks(kv, []int32{1}, got[:2*per]),
			"not a cache":  b.ReadBlocks(nil, []int32{1}, got[:per]),
		} {
			if err == nil {
				t.Errorf("%s %s: accepted", dt, name)
			}
		}
	}
}

// TestReadBlocksQuantizedLayout: a quantized cache's blocks are laid out as backend.KVSpec
// documents: per layer the keys' codes (slot after slot, head after head), then their
// float32 scales (one per head vector here: a head dimension of 3 is one group), then the
// values' codes and scales; decoded through the codec they read back kvValue to within
// half an int8 step.
func TestReadBlocksQuantizedLayout(t *testing.T) {
	b := newBackend(t)
	spec := blockSpec(quant.KVInt8)
	kv := filledCache(t, b, spec)
	per := spec.BlockBytes()
	vecs := spec.BlockSize * spec.KVHeads
	if want := 2 * spec.Layers * vecs * (spec.HeadDim + 4); per != want {
		t.Fatalf("block bytes %d, want %d", per, want)
	}
	dst := make([]byte, 2*per)
	if err := b.ReadBlocks(kv, []int32{3, 1}, dst); err != nil {
		t.Fatal(err)
	}
	part := vecs * (spec.HeadDim + 4) // one layer's keys (or values)
	for i, blk := range []int{3, 1} {
		for l := range spec.Layers {
			for kvPart := range 2 {
				base := i*per + (2*l+kvPart)*part
				for v := range vecs {
					scale := math.Float32frombits(binary.LittleEndian.Uint32(dst[base+vecs*spec.HeadDim+4*v:]))
					s, h := blk*spec.BlockSize+v/spec.KVHeads, v%spec.KVHeads
					for d := range spec.HeadDim {
						got := float32(int8(dst[base+v*spec.HeadDim+d])) * scale
						want := kvValue(l, kvPart, s, h, d)
						if math.Abs(float64(got-want)) > float64(scale)/2*1.0001 {
							t.Fatalf("block %d layer %d part %d slot %d head %d elem %d: %g (scale %g), want %g", blk, l, kvPart, s, h, d, got, scale, want)
						}
					}
				}
			}
		}
	}
}

// FuzzBlocks: any bytes written into any valid blocks read back bit for bit (NaN payloads
// of an F32 cache included); invalid ids are errors, never a panic.
func FuzzBlocks(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7}, []byte{1, 3}, false)
	f.Add([]byte{0xff, 0xff, 0xbf, 0x7f, 0x01, 0x00, 0x80, 0x7f}, []byte{4, 4, 0}, true)
	f.Add([]byte{}, []byte{9}, false)
	b := New(1)
	defer b.Close()
	f.Fuzz(func(t *testing.T, data, ids []byte, half bool) {
		dt := quant.F32
		if half {
			dt = quant.F16
		}
		spec := blockSpec(dt)
		kv, err := b.NewKVCache(spec)
		if err != nil {
			t.Fatal(err)
		}
		blocks := make([]int32, len(ids))
		valid := true
		for i, id := range ids {
			blocks[i] = int32(id%8) - 1 // -1 .. 6: some outside the 5 blocks
			valid = valid && blocks[i] >= 0 && int(blocks[i]) < spec.NumBlocks
		}
		src := make([]byte, len(blocks)*spec.BlockBytes())
		for i := range src {
			if len(data) > 0 {
				src[i] = data[i%len(data)] ^ byte(i/len(data))
			}
		}
		if err := b.WriteBlocks(kv, blocks, src); (err == nil) != valid {
			t.Fatalf("blocks %v: write error %v", blocks, err)
		}
		if !valid {
			return
		}
		// The last write of each block wins: read every block once, in order of last write.
		last := map[int32]int{}
		for i, blk := range blocks {
			last[blk] = i
		}
		for blk, i := range last {
			got := make([]byte, spec.BlockBytes())
			if err := b.ReadBlocks(kv, []int32{blk}, got); err != nil {
				t.Fatal(err)
			}
			if want := src[i*len(got) : (i+1)*len(got)]; !bytes.Equal(got, want) {
				t.Fatalf("block %d reads back other bytes", blk)
			}
		}
	})
}

// TestReadLayerBlocks: a layer's part of blocks read by ReadLayerBlocks is that layer's
// slice of each block ReadBlocks lays out, for every element type; bad layers, ids and
// buffers are errors.
func TestReadLayerBlocks(t *testing.T) {
	b := newBackend(t)
	for _, dt := range []quant.Type{quant.F32, quant.F16, quant.KVInt8, quant.KVFP8E4M3} {
		spec := blockSpec(dt)
		kv := filledCache(t, b, spec)
		blocks := []int32{4, 1, 4}
		per := spec.BlockBytes()
		lb := per / spec.Layers
		whole := make([]byte, len(blocks)*per)
		if err := b.ReadBlocks(kv, blocks, whole); err != nil {
			t.Fatal(err)
		}
		for l := range spec.Layers {
			got := make([]byte, len(blocks)*lb)
			wait, err := b.ReadLayerBlocks(kv, l, blocks, got)
			if err == nil {
				err = wait()
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range blocks {
				if want := whole[i*per+l*lb:][:lb]; !bytes.Equal(got[i*lb:][:lb], want) {
					t.Fatalf("%s: layer %d of block %d differs from its part of ReadBlocks", dt, l, blocks[i])
				}
			}
		}
		buf := make([]byte, lb)
		for name, c := range map[string]struct {
			layer  int
			blocks []int32
		}{
			"layer past the last": {spec.Layers, []int32{1}},
			"negative layer":      {-1, []int32{1}},
			"block outside":       {0, []int32{int32(spec.NumBlocks)}},
			"short buffer":        {0, []int32{1, 2}},
		} {
			if _, err := b.ReadLayerBlocks(kv, c.layer, c.blocks, buf); err == nil {
				t.Errorf("%s: %s: no error", dt, name)
			}
		}
	}
}

// TestValuesAreKeys: a cache whose values are its keys (KVSpec.ValuesAreKeys, MLA's) takes
// half the bytes a block, writes the keys alone (the v given is not stored), moves the keys
// alone through ReadBlocks, WriteBlocks and ReadLayerBlocks, and attention weighs the keys
// as values: its output is the softmax-weighted sum of the keys, computed here in float64.
func TestValuesAreKeys(t *testing.T) {
	b := newBackend(t)
	for _, dt := range []quant.Type{quant.F32, quant.F16, quant.KVInt8} {
		spec := blockSpec(dt)
		spec.ValuesAreKeys = true
		both := spec
		both.ValuesAreKeys = false
		if 2*spec.BlockBytes() != both.BlockBytes() {
			t.Fatalf("%s: BlockBytes %d with values as keys, %d without", dt, spec.BlockBytes(), both.BlockBytes())
		}
		kv := filledCache(t, b, spec)
		per := spec.BlockBytes()
		got := make([]byte, 2*per)
		if err := b.ReadBlocks(kv, []int32{3, 1}, got); err != nil {
			t.Fatal(err)
		}
		if dt != quant.KVInt8 {
			elem := map[quant.Type]int{quant.F32: 4, quant.F16: 2}[dt]
			off := 0
			for _, blk := range []int{3, 1} {
				for l := range 2 {
					for o := range 2 {
						for h := range 2 {
							for d := range 3 {
								var v float32
								if dt == quant.F16 {
									v = quant.F16ToF32(binary.LittleEndian.Uint16(got[off:]))
								} else {
									v = math.Float32frombits(binary.LittleEndian.Uint32(got[off:]))
								}
								if want := kvValue(l, 0, blk*2+o, h, d); v != want {
									t.Fatalf("%s: block %d layer %d slot %d head %d dim %d: %g, want the key %g", dt, blk, l, o, h, d, v, want)
								}
								off += elem
							}
						}
					}
				}
			}
		}
		other, err := b.NewKVCache(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.WriteBlocks(other, []int32{0, 4}, got); err != nil {
			t.Fatal(err)
		}
		back := make([]byte, 2*per)
		if err := b.ReadBlocks(other, []int32{0, 4}, back); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, got) {
			t.Errorf("%s: blocks written into a second cache do not read back", dt)
		}
		layer := make([]byte, per/spec.Layers)
		if _, err := b.ReadLayerBlocks(kv, 1, []int32{3}, layer); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(layer, got[per/2:per]) {
			t.Errorf("%s: layer 1's read of block 3 is not ReadBlocks' layer 1", dt)
		}
		if dt != quant.F32 {
			continue
		}
		// One query of two heads at context index 4 over slots 0..4 of layer 0.
		l0 := kv.(*kvCache).layers[0]
		q := []float32{0.3, -0.2, 0.5, -0.4, 0.1, 0.25}
		out := make([]float32, 6)
		if err := cpu.Attention(b.pool, out, q, 1, 2, l0, []int32{0, 1, 2}, []int32{4}, 0.7); err != nil {
			t.Fatal(err)
		}
		for h := range 2 {
			var w [5]float64
			var sum float64
			for s := range 5 {
				var dot float64
				for d := range 3 {
					dot += float64(q[h*3+d]) * float64(kvValue(0, 0, s, h, d))
				}
				w[s] = math.Exp(0.7 * dot)
				sum += w[s]
			}
			for d := range 3 {
				var want float64
				for s := range 5 {
					want += w[s] / sum * float64(kvValue(0, 0, s, h, d))
				}
				if math.Abs(float64(out[h*3+d])-want) > 1e-5*max(1, math.Abs(want)) {
					t.Errorf("head %d dim %d: attention %g, want the keys' weighted sum %g", h, d, out[h*3+d], want)
				}
			}
		}
	}
}
