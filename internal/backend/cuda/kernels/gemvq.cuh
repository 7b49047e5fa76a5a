// gemvq.cuh: the quantized GEMV templates (gemvq.cu and moe.cu instantiate them).
//
// Quantized weights: matrices kept on the device in GGML's block layouts, as a GGUF file
// holds them (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), and dequantized in registers
// where they are used: the decode GEMV reads 4.5 to 8.5 bits a weight instead of the 16 of a
// widened BF16 copy. Larger batches dequantize a chunk of rows into a BF16 scratch for
// cuBLAS (dequant_bf16_*), and quantized embedding tables decode the step's rows
// (embed_*).
//
// Every layout is reached through one question: the 16 weights of unit u of a row (row
// elements 16u .. 16u+15). Each type answers it with Q::unit(row, u, q, d, m): the unit's
// quants as 16 unsigned bytes q (in element order, four to a word), and its scale d and
// offset m, so that weight j is d * (q_j - Q::BIAS) - m. The kernels are then written once
// over Q, and they spend little on each weight: a byte becomes a float without the slow
// integer conversion (__byte_perm places it in the mantissa of 2^23, one subtraction
// removes the 2^23 and the type's bias, exactly), and d and m are applied once a unit to
// the dot product with x and to the sum of x.

// ld_u16 loads a little-endian 16-bit word from a 2-byte aligned address.
__device__ __forceinline__ unsigned ld_u16(const unsigned char* p) { return __ldg((const unsigned short*)p); }

// ld16 loads 16 bytes from a 2-byte aligned address as four little-endian words (GGML's
// blocks of 18, 22, 34 or 210 bytes leave their quants only 2-byte aligned).
__device__ __forceinline__ void ld16(const unsigned char* p, unsigned* w) {
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = ld_u16(p + 4 * i) | (ld_u16(p + 4 * i + 2) << 16);
}

// ld16a loads 16 bytes from a 16-byte aligned address.
__device__ __forceinline__ void ld16a(const unsigned char* p, unsigned* w) {
    uint4 v = __ldg((const uint4*)p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
}

// half_at returns the float value of the IEEE half at a 2-byte aligned address.
__device__ __forceinline__ float half_at(const unsigned char* p) {
    f16 h;
    h.x = (unsigned short)ld_u16(p);
    return to_f32(h);
}

// ldb loads one byte.
__device__ __forceinline__ unsigned ldb(const unsigned char* p) { return __ldg(p); }

// spread4 moves bits 0..3 of b to bit 0 of bytes 0..3.
__device__ __forceinline__ unsigned spread4(unsigned b) { return ((b & 15u) * 0x00204081u) & 0x01010101u; }

// magic returns byte i of word w as the float 2^23 + byte (exactly).
__device__ __forceinline__ float magic(unsigned w, int i) { return __int_as_float(__byte_perm(w, 0x4B000000u, 0x7540u + i)); }

// Q8_0: {f16 d; i8 qs[32]}: w = d*q, the signed byte stored with its top bit flipped
// (q + 128).
struct q8_0 {
    static constexpr int ELEMS = 32, BYTES = 34;
    static constexpr bool MIN = false;
    static constexpr float BIAS = 128.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 1) * BYTES;
        d = half_at(b), m = 0.f;
        ld16(b + 2 + 16 * (u & 1), q);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] ^= 0x80808080u;
    }
};

// Q4_0: {f16 d; u8 qs[16]}: element j < 16 is the low nibble of qs[j], element 16 + j its
// high nibble; w = d*(q-8).
struct q4_0 {
    static constexpr int ELEMS = 32, BYTES = 18;
    static constexpr bool MIN = false;
    static constexpr float BIAS = 8.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 1) * BYTES;
        int sh = 4 * (u & 1);
        d = half_at(b), m = 0.f;
        ld16(b + 2, q);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = (q[i] >> sh) & 0x0F0F0F0Fu;
    }
};

// Q4_1: {f16 d; f16 min; u8 qs[16]}: Q4_0's nibbles, w = d*q + min.
struct q4_1 {
    static constexpr int ELEMS = 32, BYTES = 20;
    static constexpr bool MIN = true;
    static constexpr float BIAS = 0.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 1) * BYTES;
        int sh = 4 * (u & 1);
        d = half_at(b), m = -half_at(b + 2);
        ld16(b + 4, q);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = (q[i] >> sh) & 0x0F0F0F0Fu;
    }
};

// Q5_0: {f16 d; u32 qh; u8 qs[16]}: Q4_0's nibbles with a fifth bit, bit j of qh for
// element j; w = d*(q-16).
struct q5_0 {
    static constexpr int ELEMS = 32, BYTES = 22;
    static constexpr bool MIN = false;
    static constexpr float BIAS = 16.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 1) * BYTES;
        int sh = 4 * (u & 1);
        d = half_at(b), m = 0.f;
        unsigned qh = (ld_u16(b + 2) | (ld_u16(b + 4) << 16)) >> (16 * (u & 1));
        ld16(b + 6, q);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = ((q[i] >> sh) & 0x0F0F0F0Fu) | (spread4(qh >> (4 * i)) << 4);
    }
};

// Q5_1: {f16 d; f16 min; u32 qh; u8 qs[16]}: Q5_0's quants, w = d*q + min.
struct q5_1 {
    static constexpr int ELEMS = 32, BYTES = 24;
    static constexpr bool MIN = true;
    static constexpr float BIAS = 0.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 1) * BYTES;
        int sh = 4 * (u & 1);
        d = half_at(b), m = -half_at(b + 2);
        unsigned qh = (ld_u16(b + 4) | (ld_u16(b + 6) << 16)) >> (16 * (u & 1));
        ld16(b + 8, q);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = ((q[i] >> sh) & 0x0F0F0F0Fu) | (spread4(qh >> (4 * i)) << 4);
    }
};

// ifloat returns a small non-negative integer (below 2^23) as a float, exactly, without the
// slow integer conversion.
__device__ __forceinline__ float ifloat(unsigned v) { return __int_as_float(0x4B000000u | v) - 8388608.f; }

// scale_min_k4 returns the 6-bit scale and min of sub-block j of a Q4_K/Q5_K block from its
// 12 packed scale bytes s (4-byte aligned; the quant package's ScaleMinK4), without a
// branch: sub-blocks 0-3 keep theirs in the low 6 bits of bytes j and j+4, sub-blocks 4-7
// the low 4 bits in byte j+4 and the top 2 in the top bits of bytes j-4 and j.
__device__ __forceinline__ void scale_min_k4(const unsigned char* s, int j, float& sc, float& mn) {
    const unsigned* w = (const unsigned*)s;
    int sh = 8 * (j & 3);
    unsigned a = (__ldg(w) >> sh) & 0xffu, b = (__ldg(w + 1) >> sh) & 0xffu, c = (__ldg(w + 2) >> sh) & 0xffu;
    bool lo = j < 4;
    sc = ifloat(lo ? a & 63u : (c & 15u) | ((a >> 6) << 4));
    mn = ifloat(lo ? b & 63u : (c >> 4) | ((b >> 6) << 4));
}

// Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]} for 256 weights in 8 sub-blocks of 32:
// sub-block 2p takes the low nibbles of qs[32p .. 32p+31], sub-block 2p+1 their high
// nibbles; w = d*sc*q - dmin*m. Blocks of 144 bytes keep the quants 16-byte aligned.
struct q4_k {
    static constexpr int ELEMS = 256, BYTES = 144;
    static constexpr bool MIN = true;
    static constexpr float BIAS = 0.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 4) * BYTES;
        int e0 = (u & 15) * 16, j = e0 >> 5, sh = 4 * (j & 1);
        float sc, mn;
        scale_min_k4(b + 4, j, sc, mn);
        d = half_at(b) * sc, m = half_at(b + 2) * mn;
        ld16a(b + 16 + 32 * (j >> 1) + (e0 & 31), q);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = (q[i] >> sh) & 0x0F0F0F0Fu;
    }
};

// Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: Q4_K with a fifth bit,
// bit j of qh[l] for element l of sub-block j.
struct q5_k {
    static constexpr int ELEMS = 256, BYTES = 176;
    static constexpr bool MIN = true;
    static constexpr float BIAS = 0.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 4) * BYTES;
        int e0 = (u & 15) * 16, j = e0 >> 5, sh = 4 * (j & 1), l0 = e0 & 31;
        float sc, mn;
        scale_min_k4(b + 4, j, sc, mn);
        d = half_at(b) * sc, m = half_at(b + 2) * mn;
        unsigned h[4];
        ld16a(b + 16 + l0, h);
        ld16a(b + 48 + 32 * (j >> 1) + l0, q);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = ((q[i] >> sh) & 0x0F0F0F0Fu) | (((h[i] >> j) & 0x01010101u) << 4);
    }
};

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: in half n (128 weights), quarter t
// (32 weights) takes the low (t < 2) or high nibbles of ql[64n + 32(t&1) + l] and bits 2t,
// 2t+1 of qh[32n + l]; every 16 weights share a scale; w = d*scale*(q-32).
struct q6_k {
    static constexpr int ELEMS = 256, BYTES = 210;
    static constexpr bool MIN = false;
    static constexpr float BIAS = 32.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 4) * BYTES;
        int e0 = (u & 15) * 16, n = e0 >> 7, t = (e0 >> 5) & 3, l0 = e0 & 31, sh = 4 * (t >> 1);
        d = half_at(b + 208) * (float)(signed char)ldb(b + 192 + (e0 >> 4)), m = 0.f;
        unsigned h[4];
        ld16(b + 64 * n + 32 * (t & 1) + l0, q);
        ld16(b + 128 + 32 * n + l0, h);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = ((q[i] >> sh) & 0x0F0F0F0Fu) | (((h[i] >> (2 * t)) & 0x03030303u) << 4);
    }
};

// Q2_K: {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin} for 256 weights in 16 sub-blocks of
// 16, one a unit: element 128n + 32k + 16h + l takes bits 2k, 2k+1 of qs[32n + 16h + l];
// scales[j] holds sub-block j's 4-bit scale (low nibble) and min (high nibble);
// w = d*scale*q - dmin*min. Blocks of 84 bytes leave the quants 4-byte aligned.
struct q2_k {
    static constexpr int ELEMS = 256, BYTES = 84;
    static constexpr bool MIN = true;
    static constexpr float BIAS = 0.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 4) * BYTES;
        int j = u & 15, n = j >> 3, k = (j >> 1) & 3, h = j & 1;
        unsigned sc = ldb(b + j);
        d = half_at(b + 80) * ifloat(sc & 15u), m = half_at(b + 82) * ifloat(sc >> 4);
        ld16(b + 16 + 32 * n + 16 * h, q);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = (q[i] >> (2 * k)) & 0x03030303u;
    }
};

// Q3_K: {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: Q2_K's 2-bit layout for the low
// bits, the third bit of element 128n + 32k + 16h + l in bit 4n + k of hmask[16h + l] (a
// clear bit means -4), and 16 signed 6-bit scales packed in 12 bytes (the quant package's
// UnpackScalesQ3_K); w = d*scale*(q - 4) for q = low | high << 2.
struct q3_k {
    static constexpr int ELEMS = 256, BYTES = 110;
    static constexpr bool MIN = false;
    static constexpr float BIAS = 4.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 4) * BYTES;
        int j = u & 15, n = j >> 3, k = (j >> 1) & 3, h = j & 1;
        const unsigned char* s = b + 96;
        unsigned lo = j < 8 ? ldb(s + j) & 15u : ldb(s + j - 8) >> 4, hi = (ldb(s + 8 + (j & 3)) >> (2 * (j >> 2))) & 3u;
        d = half_at(b + 108) * (float)((int)(lo | (hi << 4)) - 32), m = 0.f;
        unsigned hm[4];
        ld16(b + 16 * h, hm);
        ld16(b + 32 + 32 * n + 16 * h, q);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = ((q[i] >> (2 * k)) & 0x03030303u) | (((hm[i] >> (4 * n + k)) & 0x01010101u) << 2);
    }
};

// Q8_0R: Q8_0 repacked by super-blocks of 8 blocks (256 weights, 272 bytes): the 8 blocks'
// f16 scales, then their 256 quants in element order, so that a unit's 16 quants are one
// aligned 16-byte load (the Go side's Repack writes it).
struct q8_0r {
    static constexpr int ELEMS = 256, BYTES = 272;
    static constexpr bool MIN = false;
    static constexpr float BIAS = 128.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 4) * BYTES;
        d = half_at(b + 2 * ((u & 15) >> 1)), m = 0.f;
        ld16a(b + 16 + 16 * (u & 15), q);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] ^= 0x80808080u;
    }
};

// Q6_KR: Q6_K repacked by super-blocks of 8 blocks (2048 weights, 1680 bytes): the 8
// blocks' ql (128 bytes each), then their qh (64 each), their scales (16 each) and their d,
// so that both of a unit's 16-byte loads are aligned (Repack writes it). Within a block the
// layout is Q6_K's.
struct q6_kr {
    static constexpr int ELEMS = 2048, BYTES = 1680;
    static constexpr bool MIN = false;
    static constexpr float BIAS = 32.f;
    static __device__ __forceinline__ void unit(const unsigned char* row, int u, unsigned* q, float& d, float& m) {
        const unsigned char* b = row + (long long)(u >> 7) * BYTES;
        int j = (u >> 4) & 7, e0 = (u & 15) * 16, n = e0 >> 7, t = (e0 >> 5) & 3, l0 = e0 & 31, sh = 4 * (t >> 1);
        d = half_at(b + 1664 + 2 * j) * (float)(signed char)ldb(b + 1536 + 16 * j + (e0 >> 4)), m = 0.f;
        unsigned h[4];
        ld16a(b + 128 * j + 64 * n + 32 * (t & 1) + l0, q);
        ld16a(b + 1024 + 64 * j + 32 * n + l0, h);
#pragma unroll
        for (int i = 0; i < 4; i++) q[i] = ((q[i] >> sh) & 0x0F0F0F0Fu) | (((h[i] >> (2 * t)) & 0x03030303u) << 4);
    }
};

// unit_values decodes unit u of a row into its 16 float weights.
template <typename Q>
__device__ __forceinline__ void unit_values(const unsigned char* row, int u, float* v) {
    unsigned q[4];
    float d, m;
    Q::unit(row, u, q, d, m);
#pragma unroll
    for (int j = 0; j < 16; j++) v[j] = d * (magic(q[j >> 2], j & 3) - (8388608.f + Q::BIAS)) - m;
}

// accumulate_unit adds unit u of the R weight rows wr, decoded to floats in registers,
// times the same unit of each of x's n (<= NT) token rows, to acc.
template <typename Q, int R, int NT>
__device__ __forceinline__ void accumulate_unit(const unsigned char* const* wr, int u, const float* __restrict__ x, int n, int k,
                                                float (&acc)[R][NT]) {
    float f[R][16], d[R], mn[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        unsigned q[4];
        Q::unit(wr[i], u, q, d[i], mn[i]);
#pragma unroll
        for (int j = 0; j < 16; j++) f[i][j] = magic(q[j >> 2], j & 3) - (8388608.f + Q::BIAS);
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t < n) {
            const float4* xp = (const float4*)(x + (long long)t * k + u * 16);
            float4 a[4];
#pragma unroll
            for (int c = 0; c < 4; c++) a[c] = __ldg(xp + c);
            float sx = 0.f;
            if constexpr (Q::MIN) {
#pragma unroll
                for (int c = 0; c < 4; c++) sx += (a[c].x + a[c].y) + (a[c].z + a[c].w);
            }
#pragma unroll
            for (int i = 0; i < R; i++) {
                float dot = 0.f;
#pragma unroll
                for (int c = 0; c < 4; c++)
                    dot += f[i][4 * c] * a[c].x + f[i][4 * c + 1] * a[c].y + f[i][4 * c + 2] * a[c].z + f[i][4 * c + 3] * a[c].w;
                acc[i][t] += Q::MIN ? d[i] * dot - mn[i] * sx : d[i] * dot;
            }
        }
    }
}

// The int8 path (the _x8 kernels): the activations quantized too, so that the inner product runs
// on dp4a, four byte products a instruction, instead of a float multiply-add a weight.
// x is quantized per 16-value unit, as the weights are: scale dx = max|x| / 127 and
// q = round(x * 127 / max|x|), so x ~ dx * q (the choice of llama.cpp's Q8_1 activations, at
// twice its granularity), once a launch by quantize_x8_rows before the GEMV (x8: [n][k/4]
// words of four bytes, xd: [n][k/16] scales). A unit of weights becomes signed bytes q - BIAS
// (__vsub4; every type's quants fit), and its part of the dot product is
//     dx * (d * sum (q_w - BIAS) q_x  -  m * sum q_x),
// two integer sums of four dp4a each (the second only for the types with a min, and shared
// by the R weight rows).

// quantize_x8_vals writes 16 values (a, four float4) as signed bytes to q and their scale
// to *d: the int8 layout's rounding of one unit of x.
__device__ __forceinline__ void quantize_x8_vals(const float4* a, unsigned* q, float* d) {
    float amax = 0.f;
#pragma unroll
    for (int c = 0; c < 4; c++) amax = fmaxf(amax, fmaxf(fmaxf(fabsf(a[c].x), fabsf(a[c].y)), fmaxf(fabsf(a[c].z), fabsf(a[c].w))));
    float id = amax > 0.f ? 127.f / amax : 0.f;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        unsigned b0 = (unsigned)__float2int_rn(a[c].x * id) & 0xffu, b1 = (unsigned)__float2int_rn(a[c].y * id) & 0xffu;
        unsigned b2 = (unsigned)__float2int_rn(a[c].z * id) & 0xffu, b3 = (unsigned)__float2int_rn(a[c].w * id) & 0xffu;
        q[c] = b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
    }
    *d = amax / 127.f;
}

// store_x8 rounds the 16 values of a and writes the bytes and scale where
// quantize_x8_rows writes unit u: 16 bytes at x8 + 16u, the scale at d[u].
__device__ __forceinline__ void store_x8(const float4* a, unsigned char* x8, float* d, long long u) {
    unsigned q[4];
    quantize_x8_vals(a, q, d + u);
    *(uint4*)(x8 + 16LL * u) = make_uint4(q[0], q[1], q[2], q[3]);
}

// accumulate_unit_x8 is accumulate_unit on the int8 path: each token row's unit of x as
// quantize_x8_vals rounded it (x8 and xd), the weights' quants as signed bytes, dp4a.
template <typename Q, int R, int NT>
__device__ __forceinline__ void accumulate_unit_x8(const unsigned char* const* wr, int u, const unsigned* __restrict__ x8,
                                                   const float* __restrict__ xd, int n, int k, float (&acc)[R][NT]) {
    constexpr unsigned bias = (unsigned)Q::BIAS * 0x01010101u;
    int wq[R][4];
    float d[R], mn[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        unsigned q[4];
        Q::unit(wr[i], u, q, d[i], mn[i]);
#pragma unroll
        for (int j = 0; j < 4; j++) wq[i][j] = (int)__vsub4(q[j], bias);
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t < n) {
            uint4 xq = __ldg((const uint4*)(x8 + (long long)t * (k >> 2)) + u);
            float dx = __ldg(xd + (long long)t * (k >> 4) + u);
            int xv[4] = {(int)xq.x, (int)xq.y, (int)xq.z, (int)xq.w};
            int xs = 0;
            if constexpr (Q::MIN) {
#pragma unroll
                for (int j = 0; j < 4; j++) xs = dp4a(xv[j], 0x01010101, xs);
            }
#pragma unroll
            for (int i = 0; i < R; i++) {
                int dot = 0;
#pragma unroll
                for (int j = 0; j < 4; j++) dot = dp4a(wq[i][j], xv[j], dot);
                float v = Q::MIN ? d[i] * (float)dot - mn[i] * (float)xs : d[i] * (float)dot;
                acc[i][t] += dx * v;
            }
        }
    }
}

// q4k_pair reads pair p of a Q4_K row for the int8 path: the 16 bytes of quants whose low
// nibbles are elements e .. e+15 of sub-block 2c and whose high nibbles the same elements of
// sub-block 2c+1 (block p / 8, c = (p % 8) / 2, e = 16 (p % 2)), with both sub-blocks' scales
// and mins: the two units the split layout would read apart, from one load of the quants.
__device__ __forceinline__ void q4k_pair(const unsigned char* row, int p, int (&q)[2][4], float (&d)[2], float (&m)[2]) {
    const unsigned char* b = row + (long long)(p >> 3) * q4_k::BYTES;
    int c = (p & 7) >> 1;
    float sc0, mn0, sc1, mn1;
    scale_min_k4(b + 4, 2 * c, sc0, mn0);
    scale_min_k4(b + 4, 2 * c + 1, sc1, mn1);
    float dd = half_at(b), dm = half_at(b + 2);
    d[0] = dd * sc0, m[0] = dm * mn0, d[1] = dd * sc1, m[1] = dm * mn1;
    unsigned w[4];
    ld16a(b + 16 + 32 * c + 16 * (p & 1), w);
#pragma unroll
    for (int j = 0; j < 4; j++) q[0][j] = (int)(w[j] & 0x0F0F0F0Fu), q[1][j] = (int)((w[j] >> 4) & 0x0F0F0F0Fu);
}

// accumulate_pair_x8 is accumulate_unit_x8 for Q4_K over pair p (q4k_pair): the units
// 4c + e/16 and 4c + e/16 + 2 of the pair's block, added to acc in that order.
template <int R, int NT>
__device__ __forceinline__ void accumulate_pair_x8(const unsigned char* const* wr, int p, const unsigned* __restrict__ x8,
                                                   const float* __restrict__ xd, int n, int k, float (&acc)[R][NT]) {
    int wq[R][2][4];
    float d[R][2], mn[R][2];
#pragma unroll
    for (int i = 0; i < R; i++) q4k_pair(wr[i], p, wq[i], d[i], mn[i]);
    int u0 = (p >> 3) * 16 + 4 * ((p & 7) >> 1) + (p & 1);
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t < n) {
#pragma unroll
            for (int s = 0; s < 2; s++) {
                int u = u0 + 2 * s;
                uint4 xq = __ldg((const uint4*)(x8 + (long long)t * (k >> 2)) + u);
                float dx = __ldg(xd + (long long)t * (k >> 4) + u);
                int xv[4] = {(int)xq.x, (int)xq.y, (int)xq.z, (int)xq.w};
                int xs = 0;
#pragma unroll
                for (int j = 0; j < 4; j++) xs = dp4a(xv[j], 0x01010101, xs);
#pragma unroll
                for (int i = 0; i < R; i++) {
                    int dot = 0;
#pragma unroll
                    for (int j = 0; j < 4; j++) dot = dp4a(wq[i][s][j], xv[j], dot);
                    acc[i][t] += dx * (d[i][s] * (float)dot - mn[i][s] * (float)xs);
                }
            }
        }
    }
}

// pairs_x8 tells whether the int8 path of Q reads its rows in pairs of units (Q4_K, whose
// two sub-blocks share each byte of quants) rather than unit by unit.
template <typename Q>
struct pairs_x8 {
    static constexpr bool value = false;
};
template <>
struct pairs_x8<q4_k> {
    static constexpr bool value = true;
};

// split_sum brings together the W warps' partial sums of a block in the split layout: each
// lane holds acc[i][t] for R weight rows and NT token rows; thread v < R*NT of the block
// returns the block's total of value v (row v / NT, token v % NT), the warps' sums added in
// warp order. Every thread of the block must call it (it synchronizes).
template <int R, int NT, int W>
__device__ __forceinline__ float split_sum(const float (&acc)[R][NT], int lane, int wid) {
    constexpr int V = R * NT;
    __shared__ float part[W][V];
    float vals[V];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) vals[i * NT + t] = acc[i][t];
    float s = warp_sums<V>(vals, lane);
    if (lane % (32 / V) == 0) part[wid][lane / (32 / V)] = s;
    __syncthreads();
    float tot = 0.f;
    if (threadIdx.x < V) {
#pragma unroll
        for (int j = 0; j < W; j++) tot += part[j][threadIdx.x];
    }
    return tot;
}

// gemvqs_rows is the split-k layout of the GEMV: the W warps of a block share its R weight
// rows, warp w taking units 32w + lane, 32w + lane + 32W, ... of each (so that a row of a
// few thousand values is read by W warps at once rather than by one warp in sequence),
// and the warps' sums meet in shared memory. With X8 it reads x as quantize_x8_vals rounded it
// (x8, xd) and multiplies on dp4a (Q4_K two units a lane at a time: pairs_x8); without, x
// itself (x8 and xd unused). blk is the
// block's index among those of this weight (the multi-weight kernels run several weights in
// one grid).
template <typename Q, int R, int NT, int W, bool X8>
__device__ __forceinline__ void gemvqs_rows(long long blk, float* __restrict__ y, const float* __restrict__ x,
                                            const unsigned* __restrict__ x8, const float* __restrict__ xd,
                                            const unsigned char* __restrict__ w, int n, int k, int m) {
    constexpr int V = R * NT;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    long long r0 = blk * R;
    long long rowBytes = (long long)(k / Q::ELEMS) * Q::BYTES;
    int units = k >> 4;
    const unsigned char* wr[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        long long r = r0 + i < m ? r0 + i : m - 1;  // rows past m repeat the last; not written
        wr[i] = w + r * rowBytes;
    }
    float acc[R][NT];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[i][t] = 0.f;
    pdl_entry();
    if constexpr (X8 && pairs_x8<Q>::value) {
#pragma unroll 2
        for (int p = wid * 32 + lane; p < (units >> 1); p += 32 * W) accumulate_pair_x8<R, NT>(wr, p, x8, xd, n, k, acc);
    } else {
#pragma unroll 2
        for (int u = wid * 32 + lane; u < units; u += 32 * W) {
            if constexpr (X8)
                accumulate_unit_x8<Q, R, NT>(wr, u, x8, xd, n, k, acc);
            else
                accumulate_unit<Q, R, NT>(wr, u, x, n, k, acc);
        }
    }
    float tot = split_sum<R, NT, W>(acc, lane, wid);
    int i = threadIdx.x / NT, t = threadIdx.x % NT;
    if (threadIdx.x < V && t < n && r0 + i < m) y[(long long)t * m + r0 + i] = tot;
}

// dequant_rows writes rows rows of a quantized weight (w at the first of them, k values a
// row, k a multiple of Q::ELEMS) as BF16 into out ([rows][k]): one 16-weight unit a
// thread, over a grid-stride loop, in two 16-byte stores.
template <typename Q>
__device__ __forceinline__ void dequant_rows(bf16* out, const unsigned char* w, int rows, int k) {
    pdl_entry();
    long long perRow = k >> 4, total = (long long)rows * perRow, rowBytes = (long long)(k / Q::ELEMS) * Q::BYTES;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / perRow;
        float v[16];
        unit_values<Q>(w + r * rowBytes, (int)(i - r * perRow), v);
        unsigned p[8];
#pragma unroll
        for (int j = 0; j < 8; j++) p[j] = (unsigned)from_f32<bf16>(v[2 * j]).x | ((unsigned)from_f32<bf16>(v[2 * j + 1]).x << 16);
        uint4 lo, hi;
        lo.x = p[0], lo.y = p[1], lo.z = p[2], lo.w = p[3];
        hi.x = p[4], hi.y = p[5], hi.z = p[6], hi.w = p[7];
        uint4* o = (uint4*)(out + i * 16);
        o[0] = lo;
        o[1] = hi;
    }
}

// embed_rows: out[row] = table[tokens[row]] decoded to float32 (embed's contract: ids
// outside [0, vocab) give a zero row); grid = tokens.
template <typename Q>
__device__ __forceinline__ void embed_rows(float* out, const unsigned char* table, const int* tokens, int vocab, int dim) {
    pdl_entry();
    long long row = blockIdx.x;
    int tok = tokens[row];
    float* dst = out + row * dim;
    if (tok < 0 || tok >= vocab) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = 0.f;
        return;
    }
    const unsigned char* src = table + (long long)tok * (dim / Q::ELEMS) * Q::BYTES;
    for (int u = threadIdx.x; u < (dim >> 4); u += blockDim.x) {
        float v[16];
        unit_values<Q>(src, u, v);
#pragma unroll
        for (int i = 0; i < 16; i++) dst[u * 16 + i] = v[i];
    }
}
