package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/kvquant"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// ShiftKeys rotates the keys held in blocks, every layer of every rank, by delta positions:
// a key written at position p reads afterwards as written at p+delta. Values are left as
// they are. Keys are cached after RoPE, and RoPE rotations compose (R(a)R(b) = R(a+b)), so
// this is how a KV policy that drops tokens moves the keys behind them to their new place
// in the cache (StreamingLLM's positions). YaRN's attention factor is not applied again.
//
// It goes through the host (ReadBlocks, rotate, WriteBlocks), so it works on every backend
// that moves blocks; its cost is the blocks' bytes both ways, paid once per dropped block.
func (kv *KVCache) ShiftKeys(blocks []int32, delta int) error {
	if len(blocks) == 0 || delta == 0 {
		return nil
	}
	buf := make([]byte, len(blocks)*kv.BlockBytes())
	if err := kv.ReadBlocks(blocks, buf); err != nil {
		return fmt.Errorf("shift keys: %w", err)
	}
	total := kv.BlockBytes()
	off := 0
	for r, s := range kv.m.ranks {
		spec := kv.parts[r].Spec()
		per := spec.BlockBytes()
		rot, err := newKeyRotation(s.hostRope, delta, spec.DType)
		if err != nil {
			return fmt.Errorf("shift keys: %w", err)
		}
		rotLocal := rot
		if s.hostRopeLocal != nil {
			if rotLocal, err = newKeyRotation(s.hostRopeLocal, delta, spec.DType); err != nil {
				return fmt.Errorf("shift keys: %w", err)
			}
		}
		// Host layout: within a block, layer after layer, each the keys (BlockSize slots
		// of KVHeads x HeadDim elements) then the values (none when they are the keys).
		keyBytes := spec.BlockSize * spec.KVHeads * kvquant.RowBytes(spec.DType, spec.HeadDim)
		vec := make([]float32, spec.HeadDim)
		for i := range blocks {
			part := buf[i*total+off:][:per]
			for l := range spec.Layers {
				keys := part[l*spec.Vectors()*keyBytes:][:keyBytes]
				lr := rot
				if s.localRope(l) {
					lr = rotLocal // Gemma 3's windowed layers rotate with their own frequencies
				}
				if spec.DType.KVQuantized() {
					lr.applyQuantized(keys, spec.HeadDim)
					continue
				}
				eb := spec.DType.BlockBytes()
				for h := 0; h < len(keys); h += spec.HeadDim * eb {
					lr.apply(keys[h:h+spec.HeadDim*eb], vec)
				}
			}
		}
		off += per
	}
	if err := kv.WriteBlocks(blocks, buf); err != nil {
		return fmt.Errorf("shift keys: %w", err)
	}
	return nil
}

// keyRotation rotates head vectors stored as elements of one type by a fixed angle per pair.
type keyRotation struct {
	r        *rope
	cos, sin []float32
	dtype    quant.Type
	codec    *kvquant.Codec // a quantized cache's
}

func newKeyRotation(r *rope, delta int, dt quant.Type) (*keyRotation, error) {
	if r == nil {
		return nil, fmt.Errorf("the model has no rotary frequencies")
	}
	k := &keyRotation{r: r, cos: make([]float32, len(r.invFreq)), sin: make([]float32, len(r.invFreq)), dtype: dt}
	switch {
	case dt.KVQuantized():
		var err error
		if k.codec, err = kvquant.NewCodec(dt); err != nil {
			return nil, err
		}
	case dt != quant.F32 && dt != quant.F16 && dt != quant.BF16:
		return nil, fmt.Errorf("cache element type %s", dt)
	}
	for i, f := range r.invFreq {
		s, c := math.Sincos(float64(delta) * float64(f))
		k.cos[i], k.sin[i] = float32(c), float32(s)
	}
	return k, nil
}

// apply rotates the head vector stored in b, decoding it into vec and encoding it back.
func (k *keyRotation) apply(b []byte, vec []float32) {
	for i := range vec {
		switch k.dtype {
		case quant.F32:
			vec[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		case quant.F16:
			vec[i] = quant.F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		default:
			vec[i] = quant.BF16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	}
	k.r.apply(vec, k.cos, k.sin)
	for i, v := range vec {
		switch k.dtype {
		case quant.F32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		case quant.F16:
			binary.LittleEndian.PutUint16(b[2*i:], quant.F32ToF16(v))
		default:
			binary.LittleEndian.PutUint16(b[2*i:], quant.F32ToBF16(v))
		}
	}
}

// applyQuantized rotates every head vector of one block's keys of a quantized cache, held
// in keys as the host layout has them (the block's codes, then its float32 scales): each
// is dequantized, rotated and quantized again with a scale of its own (so a shifted key
// carries a second rounding).
func (k *keyRotation) applyQuantized(keys []byte, hd int) {
	g := kvquant.Group(hd)
	n := len(keys) / kvquant.RowBytes(k.dtype, hd) // head vectors
	codes, sb := keys[:n*hd], keys[n*hd:]
	vec, scales := make([]float32, hd), make([]float32, hd/g)
	for v := range n {
		for i := range scales {
			scales[i] = math.Float32frombits(binary.LittleEndian.Uint32(sb[4*(v*len(scales)+i):]))
		}
		k.codec.Dequantize(vec, codes[v*hd:(v+1)*hd], scales, g)
		k.r.apply(vec, k.cos, k.sin)
		k.codec.Quantize(codes[v*hd:(v+1)*hd], scales, vec, g)
		for i, s := range scales {
			binary.LittleEndian.PutUint32(sb[4*(v*len(scales)+i):], math.Float32bits(s))
		}
	}
}

// CompactKeys closes the gaps a token-granular KV policy leaves: buf holds blocks' keys and
// values in the host layout (as ReadBlocks gives them, whole blocks), keep the slots over
// those blocks that stay (ascending), either one list for every layer and KV head or one
// per layer and KV head (row l·KVHeads+g for KV head g of layer l, as the rows of
// Seq.Mass; the model not split), all of one length: a KV head's slot keep[i] moves to
// its slot i of dst (blocks in order, as many as keep fills), its key rotated by
// i-keep[i] positions as ShiftKeys rotates, so that every head's slot i holds a key at
// position i whichever token it is. The slots of dst's last block past len(keep) are
// zeroed. It writes dst (WriteBlocks).
func (kv *KVCache) CompactKeys(buf []byte, keep [][]int, dst []int32) error {
	total := kv.BlockBytes()
	if total == 0 || len(buf)%total != 0 {
		return fmt.Errorf("compact keys: %d bytes of blocks of %d", len(buf), total)
	}
	if len(keep) == 0 {
		return fmt.Errorf("compact keys: no slots to keep")
	}
	if lanes := kv.massLanes(); len(keep) != 1 && (len(keep) != lanes || len(kv.parts) != 1) {
		return fmt.Errorf("compact keys: %d lists of slots to keep for a cache of %d layers x kv heads in %d parts (one list, or one per layer and kv head of an unsplit model)", len(keep), lanes, len(kv.parts))
	}
	bs, n := kv.BlockSize, len(keep[0])
	if len(dst) != (n+bs-1)/bs {
		return fmt.Errorf("compact keys: %d slots kept into %d blocks of %d", n, len(dst), bs)
	}
	for h, lane := range keep {
		if len(lane) != n {
			return fmt.Errorf("compact keys: list %d keeps %d slots, list 0 %d", h, len(lane), n)
		}
		for i, s := range lane {
			if s < i || s >= len(buf)/total*bs || i > 0 && s <= lane[i-1] {
				return fmt.Errorf("compact keys: list %d: kept slot %d (the %d-th) out of order or out of %d blocks", h, s, i, len(buf)/total)
			}
		}
	}
	if dt := kv.m.kvDT; dt.KVQuantized() {
		return fmt.Errorf("compact keys: a cache of %s elements (compaction needs f32, f16 or bf16)", dt)
	}
	out := make([]byte, len(dst)*total)
	off := 0
	for r, s := range kv.m.ranks {
		spec := kv.parts[r].Spec()
		per, eb := spec.BlockBytes(), spec.DType.BlockBytes()
		rowBytes := spec.HeadDim * eb
		slotBytes := spec.KVHeads * rowBytes
		keyBytes := bs * slotBytes
		rots := map[int]*keyRotation{}
		rotsLocal := map[int]*keyRotation{}
		vec := make([]float32, spec.HeadDim)
		for l := range spec.Layers {
			hr, cache := s.hostRope, rots
			if s.localRope(l) {
				hr, cache = s.hostRopeLocal, rotsLocal // Gemma 3's windowed layers
			}
			for g := range spec.KVHeads {
				lane := keep[0]
				if len(keep) > 1 {
					lane = keep[l*spec.KVHeads+g]
				}
				k0, v0 := l*spec.Vectors()*keyBytes+g*rowBytes, l*spec.Vectors()*keyBytes+keyBytes+g*rowBytes
				for i, src := range lane {
					from := buf[src/bs*total+off:][:per]
					to := out[i/bs*total+off:][:per]
					key := to[k0+i%bs*slotBytes:][:rowBytes]
					copy(key, from[k0+src%bs*slotBytes:][:rowBytes])
					if !spec.ValuesAreKeys {
						copy(to[v0+i%bs*slotBytes:][:rowBytes], from[v0+src%bs*slotBytes:][:rowBytes])
					}
					delta := i - src
					if delta == 0 {
						continue
					}
					rot := cache[delta]
					if rot == nil {
						var err error
						if rot, err = newKeyRotation(hr, delta, spec.DType); err != nil {
							return fmt.Errorf("compact keys: %w", err)
						}
						cache[delta] = rot
					}
					rot.apply(key, vec)
				}
			}
		}
		off += per
	}
	if err := kv.WriteBlocks(dst, out); err != nil {
		return fmt.Errorf("compact keys: %w", err)
	}
	return nil
}
