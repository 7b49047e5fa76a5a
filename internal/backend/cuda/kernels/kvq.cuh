// The code types of the quantized KV cache and their decoding (attention_kvq.cu has the
// layout; attention.cu's tensor-core prefill reads the codes too).

#define KVQ_I8 0
#define KVQ_E4M3 1
#define KVQ_E5M2 2

// kvq_byte returns the value of byte k (0..3, a constant) of the word w of codes of type C,
// before its scale, exactly, in integer operations and one float operation (the decode
// kernel's hot loop; the conversion instructions are slower): __byte_perm moves the byte
// into a float32. int8: the byte with its top bit flipped (b + 128) becomes the mantissa
// of 2^23, and 2^23 + 128 is subtracted. FP8: the byte moves to the top of the word and an
// arithmetic shift puts exponent and mantissa at their float32 places, the sign at the
// top, so that the float32 times 2^(127 - bias) is the code's value (subnormal codes
// included: they land on float32 subnormals, which the multiplication keeps exact). The
// quantizer writes no NaN or infinity codes (E4M3's NaN bytes read as ±480).
template <int C>
__device__ __forceinline__ float kvq_byte(unsigned w, int k) {
    if (C == KVQ_I8) return __uint_as_float(__byte_perm(w ^ 0x80808080u, 0x4B000000u, 0x7440u | k)) - 8388736.f;
    int x = (int)__byte_perm(w, 0u, 0x0444u | (k << 12));  // byte k at the top, zeros below
    if (C == KVQ_E4M3) return __uint_as_float((unsigned)(x >> 4) & 0x87f00000u) * __int_as_float(247 << 23);  // 2^120
    return __uint_as_float((unsigned)(x >> 3) & 0x8fe00000u) * __int_as_float(239 << 23);  // 2^112
}

// kvq_value returns the value of code byte b of type C before its scale, exactly.
template <int C>
__device__ __forceinline__ float kvq_value(unsigned b) {
    return kvq_byte<C>(b, 0);
}

// kvq_unit writes the values of the 16 codes of u (four little-endian words), times
// scale, to f.
template <int C>
__device__ __forceinline__ void kvq_unit(const uint4& u, float scale, float* f) {
    unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 16; j++) f[j] = kvq_byte<C>(w[j >> 2], j & 3) * scale;
}
