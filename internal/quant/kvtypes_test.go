package quant

import "testing"

// TestKVTypesDistinct: the KV cache element types are no other type (a GGML type or
// kvasir's FP8 weights): each has its own id and name, and only they are KVQuantized.
func TestKVTypesDistinct(t *testing.T) {
	for kv, name := range kvTypeNames {
		if _, ok := types[kv]; ok {
			t.Errorf("kv cache type %s shares its id %d with the tensor type %s", name, uint32(kv), types[kv].name)
		}
		if got := kv.String(); got != name {
			t.Errorf("kv cache type %d is named %q, want %q", uint32(kv), got, name)
		}
	}
	for ty := range types {
		if ty.KVQuantized() {
			t.Errorf("tensor type %s reports itself a quantized kv cache type", ty)
		}
	}
}
