package quant

// KV cache element types. They are not GGML types (no GGUF file holds them, and Known,
// ParseType and RowBytes do not know them): each stores one byte per element and, per
// group of elements of a head vector, a float32 scale, in the layout of package kvquant.
// Their ids lie past GGML's and past kvasir's own weight types (FP8 is 1<<16).
const (
	// KVInt8 holds each element as a signed 8-bit integer q, the value q x scale, with
	// scale = max|x| / 127 of its group (as GGML's q8_0, with a float32 scale).
	KVInt8 Type = 1<<17 + iota
	// KVFP8E4M3 holds each element as an FP8 E4M3 ("e4m3fn": no infinities, largest 448)
	// code, the value code x scale, with scale = max|x| / 448 of its group.
	KVFP8E4M3
	// KVFP8E5M2 holds each element as an FP8 E5M2 code (largest finite 57344), the value
	// code x scale, with scale = max|x| / 57344 of its group.
	KVFP8E5M2
)

// kvTypeNames are the names String gives the KV cache element types.
var kvTypeNames = map[Type]string{KVInt8: "int8", KVFP8E4M3: "fp8_e4m3", KVFP8E5M2: "fp8_e5m2"}

// KVQuantized reports whether t is one of the quantized KV cache element types.
func (t Type) KVQuantized() bool {
	_, ok := kvTypeNames[t]
	return ok
}
