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
)

// kvCacheDTypeNames are the names ParseKVCacheDType reads, by type.
var kvCacheDTypeNames = [...]string{KVCacheAuto: "auto", KVCacheF32: "f32", KVCacheF16: "f16", KVCacheBF16: "bf16"}

// ParseKVCacheDType reads a KV cache element type: "auto" (or ""), "f32", "f16" or "bf16".
func ParseKVCacheDType(s string) (KVCacheDType, error) {
	if s == "" {
		return KVCacheAuto, nil
	}
	for t, name := range kvCacheDTypeNames {
		if s == name {
			return KVCacheDType(t), nil
		}
	}
	return 0, fmt.Errorf("kv cache dtype %q: want auto, f32, f16 or bf16", s)
}

// String returns the type's name as ParseKVCacheDType reads it.
func (t KVCacheDType) String() string {
	if int(t) < len(kvCacheDTypeNames) {
		return kvCacheDTypeNames[t]
	}
	return fmt.Sprintf("KVCacheDType(%d)", uint8(t))
}

// On returns the element type the cache holds on device d: auto is f32 on the CPU and
// bf16 on a GPU; the CPU cache holds f32 or f16.
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
			return 0, fmt.Errorf("kv cache dtype bf16: the CPU cache holds f32 or f16")
		}
		return quant.BF16, nil
	}
	return 0, fmt.Errorf("kv cache dtype %s: unknown", t)
}
