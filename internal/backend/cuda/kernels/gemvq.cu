// The quantized kernels (gemvq.cuh's templates per GGML type): GEMVs, BF16 dequantization
// and embedding gathers.

// quantize_x8_rows is quantize_x8_vals over rows of x: the int8 layout's rounding of x before
// its GEMV (x8 holds [n][k] bytes, d [n][k/16]; the tests check both against the host's).
extern "C" __global__ void quantize_x8_rows(unsigned char* x8, float* d, const float* x, int units) {
    pdl_entry();
    for (int u = blockIdx.x * blockDim.x + threadIdx.x; u < units; u += gridDim.x * blockDim.x) {
        const float4* xp = (const float4*)(x + 16LL * u);
        float4 a[4];
#pragma unroll
        for (int c = 0; c < 4; c++) a[c] = __ldg(xp + c);
        store_x8(a, x8, d, u);
    }
}

// The kernels of one quantized type: the GEMV of each bucket of token rows in the split
// layout (4 weight rows a block of 4 warps, each warp a quarter of every row's units:
// measured fastest on the H200 against each warp taking 4 rows alone, 8B Q4_K decode 261
// against 212 tok/s), on float32 x (NAME) and on x rounded to 8 bits by quantize_x8_rows
// (NAME_x8: x8 and xd), the multi-weight launches of both (NAME_m, NAME_mx8: up to three
// weights of one type over one x, q, k and v or gate and up, in one grid), the BF16
// dequantization and the embedding gather.
#define GEMVQ_MULTI(Q, NAME, R, NT, W, X8)                                                                  \
    extern "C" __global__ void __launch_bounds__(32 * W)                                                   \
        NAME(float* y0, float* y1, float* y2, const float* x, const unsigned* x8, const float* xd,         \
             const unsigned char* w0, const unsigned char* w1, const unsigned char* w2, int n, int k, int m0, \
             int m1, int m2) {                                                                             \
        long long blk = blockIdx.x, b0 = (m0 + R - 1) / R, b1 = (m1 + R - 1) / R;                         \
        float* y = y0;                                                                                     \
        const unsigned char* w = w0;                                                                       \
        int m = m0;                                                                                        \
        if (blk >= b0 + b1)                                                                                \
            blk -= b0 + b1, y = y2, w = w2, m = m2;                                                        \
        else if (blk >= b0)                                                                                \
            blk -= b0, y = y1, w = w1, m = m1;                                                             \
        gemvqs_rows<Q, R, NT, W, X8>(blk, y, x, x8, xd, w, n, k, m);                                       \
    }
#define GEMVQ_ONE(Q, NAME, R, NT, W)                                                                       \
    extern "C" __global__ void __launch_bounds__(32 * W)                                                   \
        NAME(float* y, const float* x, const unsigned char* w, int n, int k, int m) {                      \
        gemvqs_rows<Q, R, NT, W, false>(blockIdx.x, y, x, nullptr, nullptr, w, n, k, m);                   \
    }                                                                                                      \
    extern "C" __global__ void __launch_bounds__(32 * W)                                                   \
        NAME##_x8(float* y, const unsigned* x8, const float* xd, const unsigned char* w, int n, int k, int m) { \
        gemvqs_rows<Q, R, NT, W, true>(blockIdx.x, y, nullptr, x8, xd, w, n, k, m);                        \
    }                                                                                                      \
    GEMVQ_MULTI(Q, NAME##_m, R, NT, W, false)                                                              \
    GEMVQ_MULTI(Q, NAME##_mx8, R, NT, W, true)
#define GEMVQ_TYPE(Q)                                                                                      \
    GEMVQ_ONE(Q, gemvq_n1_##Q, 4, 1, 4)                                                                    \
    GEMVQ_ONE(Q, gemvq_n2_##Q, 4, 2, 4)                                                                    \
    GEMVQ_ONE(Q, gemvq_n4_##Q, 4, 4, 4)                                                                    \
    GEMVQ_ONE(Q, gemvq_n8_##Q, 4, 8, 4)                                                                    \
    extern "C" __global__ void dequant_bf16_##Q(bf16* out, const unsigned char* w, int rows, int k) {      \
        dequant_rows<Q>(out, w, rows, k);                                                                  \
    }                                                                                                      \
    extern "C" __global__ void embed_##Q(float* out, const unsigned char* t, const int* tok, int vocab, int dim) { \
        embed_rows<Q>(out, t, tok, vocab, dim);                                                            \
    }
GEMVQ_TYPE(q8_0)
GEMVQ_TYPE(q4_0)
GEMVQ_TYPE(q4_1)
GEMVQ_TYPE(q5_0)
GEMVQ_TYPE(q5_1)
GEMVQ_TYPE(q4_k)
GEMVQ_TYPE(q5_k)
GEMVQ_TYPE(q6_k)
GEMVQ_TYPE(q2_k)
GEMVQ_TYPE(q3_k)
GEMVQ_TYPE(q8_0r)
GEMVQ_TYPE(q6_kr)
