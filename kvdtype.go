package kvasir

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// KVCacheDType is the element type of the KV cache. The zero value, KVCacheAuto, is f32
// on the CPU and bf16 on a GPU.
type KVCacheDType uint8

// KV cache element types.
const (
	// KVCacheAuto is the device's own: f32 on the CPU, bf16 on a GPU.
	KVCacheAuto KVCacheDType = iota
	// KVCacheF32 holds keys and values as float32.
	KVCacheF32
	// KVCacheF16 holds them as IEEE half floats: half the memory per token of f32, so twice
	// the tokens in the same KVCacheMemory, and half the bytes attention reads.
	KVCacheF16
	// KVCacheBF16 holds them as bfloat16 (GPU only).
	KVCacheBF16
	// KVCacheFP8E4M3 holds each element as an FP8 E4M3 code and a float32 scale per 32
	// elements of a head vector (per head vector when the head dimension is not a multiple
	// of 32), the scale max|x|/448 of its group: about 1.78x the tokens of f16 in the
	// same KVCacheMemory (see package kvquant).
	KVCacheFP8E4M3
	// KVCacheFP8E5M2 is KVCacheFP8E4M3 with FP8 E5M2 codes (two mantissa bits, not three:
	// coarser, with a range the per-group scale does not need).
	KVCacheFP8E5M2
	// KVCacheInt8 holds each element as a signed 8-bit integer with a float32 scale per
	// group as KVCacheFP8E4M3, the scale max|x|/127 (GGML's q8_0 with a float32 scale).
	KVCacheInt8
)

// kvCacheDTypeNames are the names ParseKVCacheDType reads, by type.
var kvCacheDTypeNames = [...]string{KVCacheAuto: "auto", KVCacheF32: "f32", KVCacheF16: "f16", KVCacheBF16: "bf16",
	KVCacheFP8E4M3: "fp8_e4m3", KVCacheFP8E5M2: "fp8_e5m2", KVCacheInt8: "int8"}

// kvCacheDTypeAliases are other names ParseKVCacheDType reads.
var kvCacheDTypeAliases = map[string]KVCacheDType{"fp8": KVCacheFP8E4M3, "q8_0": KVCacheInt8}

// ParseKVCacheDType reads a KV cache element type: "auto" (or ""), "f32", "f16", "bf16",
// "fp8" (= "fp8_e4m3"), "fp8_e5m2" or "int8" (= "q8_0").
func ParseKVCacheDType(s string) (KVCacheDType, error) {
	if s == "" {
		return KVCacheAuto, nil
	}
	for t, name := range kvCacheDTypeNames {
		if s == name {
			return KVCacheDType(t), nil
		}
	}
	if t, ok := kvCacheDTypeAliases[s]; ok {
		return t, nil
	}
	return 0, fmt.Errorf("kv cache dtype %q: want auto, f32, f16, bf16, fp8 (fp8_e4m3), fp8_e5m2 or int8 (q8_0)", s)
}

// String returns the type's name as ParseKVCacheDType reads it.
func (t KVCacheDType) String() string {
	if int(t) < len(kvCacheDTypeNames) {
		return kvCacheDTypeNames[t]
	}
	return fmt.Sprintf("KVCacheDType(%d)", uint8(t))
}

// On returns the element type the cache holds on device d: auto is f32 on the CPU and
// bf16 on a GPU; the CPU cache holds every type but bf16, a GPU's every type.
func (t KVCacheDType) On(d Device) (quant.Type, error) {
	switch t {
	case KVCacheAuto:
		if d.CUDA {
			return quant.BF16, nil
		}
		return quant.F32, nil
	case KVCacheF32:
		return quant.F32, nil
	case KVCacheF16:
		return quant.F16, nil
	case KVCacheBF16:
		if !d.CUDA {
			return 0, fmt.Errorf("kv cache dtype bf16: the CPU cache holds f32, f16, fp8_e4m3, fp8_e5m2 or int8")
		}
		return quant.BF16, nil
	case KVCacheFP8E4M3, KVCacheFP8E5M2, KVCacheInt8:
		return map[KVCacheDType]quant.Type{KVCacheFP8E4M3: quant.KVFP8E4M3, KVCacheFP8E5M2: quant.KVFP8E5M2, KVCacheInt8: quant.KVInt8}[t], nil
	}
	return 0, fmt.Errorf("kv cache dtype %s: unknown", t)
}
