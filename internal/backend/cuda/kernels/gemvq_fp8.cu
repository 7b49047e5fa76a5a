// FP8 weights (quant.FP8 on the host, --quantization fp8): E4M3 bytes, a [m][k] row-major
// matrix with k a multiple of 16, and one float32 scale per row (per output channel) in a
// buffer of its own. The decode GEMV dequantizes them in registers in gemvq's split
// layout (4 warps of a block sharing its 4 rows, each warp a quarter of every row's
// 16-byte units), one scale multiplication a row at the end; larger batches dequantize a
// chunk of rows to BF16 for cuBLAS (dequant_bf16_fp8). E4M3 becomes float32 with integer
// operations, so these kernels build for any architecture; the backend still refuses FP8
// below compute capability 8.9, whose tensor cores the FP8 GEMMs need.

// e4m3_f32 returns the value of the E4M3 byte b: normal bytes by moving exponent and
// mantissa into a float32 and adding the exponent bias difference (127 - 7), subnormal ones
// (exponent 0) as mantissa * 2^-9, both exact. The NaN bytes (S.1111.111) decode as ±480;
// the quantizer never writes them.
__device__ __forceinline__ float e4m3_f32(unsigned b) {
    unsigned mag = b & 0x7Fu;
    float v = mag < 8u ? ifloat(mag) * 0.001953125f : __int_as_float((mag << 20) + (120u << 23));
    return __int_as_float(__float_as_int(v) | ((b & 0x80u) << 24));
}

// e4m3_unit decodes the 16 E4M3 bytes of one unit (four little-endian words) to floats.
// On sm_89 and later the hardware converts two bytes at once to two halves
// (cvt.rn.f16x2.e4m3x2, exact: every E4M3 value is an f16 value), and each half widens
// exactly to a float32: three instructions for two weights, where the integer decoding
// takes about seven a weight. Older devices (which refuse FP8 weights at load, but still
// compile this file) decode with e4m3_f32.
__device__ __forceinline__ void e4m3_unit(const unsigned* q, float* f) {
#if __CUDA_ARCH__ >= 890
#pragma unroll
    for (int j = 0; j < 8; j++) {
        unsigned short pair = (unsigned short)(q[j >> 1] >> (16 * (j & 1)));
        unsigned h2;
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(pair));
        asm("cvt.f32.f16 %0, %1;" : "=f"(f[2 * j]) : "h"((unsigned short)(h2 & 0xffffu)));
        asm("cvt.f32.f16 %0, %1;" : "=f"(f[2 * j + 1]) : "h"((unsigned short)(h2 >> 16)));
    }
#else
#pragma unroll
    for (int j = 0; j < 16; j++) f[j] = e4m3_f32((q[j >> 2] >> (8 * (j & 3))) & 0xffu);
#endif
}

// gemv_fp8_rows computes R rows of y = x · wᵀ for n (<= NT) token rows of x, the block's W
// warps splitting each row's units as gemvqs_rows does; a row's sum is multiplied by its
// scale once.
template <int R, int NT, int W>
__device__ __forceinline__ void gemv_fp8_rows(long long blk, float* __restrict__ y, const float* __restrict__ x,
                                              const unsigned char* __restrict__ w, const float* __restrict__ s, int n, int k,
                                              int m) {
    constexpr int V = R * NT;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    long long r0 = blk * R;
    int units = k >> 4;
    const unsigned char* wr[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        long long r = r0 + i < m ? r0 + i : m - 1;  // rows past m repeat the last; not written
        wr[i] = w + r * k;
    }
    float acc[R][NT];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[i][t] = 0.f;
    pdl_entry();
#pragma unroll 2
    for (int u = wid * 32 + lane; u < units; u += 32 * W) {
        float f[R][16];
#pragma unroll
        for (int i = 0; i < R; i++) {
            unsigned q[4];
            ld16a(wr[i] + 16LL * u, q);
            e4m3_unit(q, f[i]);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n) {
                const float4* xp = (const float4*)(x + (long long)t * k + u * 16);
                float4 a[4];
#pragma unroll
                for (int c = 0; c < 4; c++) a[c] = __ldg(xp + c);
#pragma unroll
                for (int i = 0; i < R; i++) {
                    float dot = 0.f;
#pragma unroll
                    for (int c = 0; c < 4; c++)
                        dot += f[i][4 * c] * a[c].x + f[i][4 * c + 1] * a[c].y + f[i][4 * c + 2] * a[c].z + f[i][4 * c + 3] * a[c].w;
                    acc[i][t] += dot;
                }
            }
        }
    }
    float tot = split_sum<R, NT, W>(acc, lane, wid);
    int i = threadIdx.x / NT, t = threadIdx.x % NT;
    if (threadIdx.x < V && t < n && r0 + i < m) y[(long long)t * m + r0 + i] = tot * __ldg(s + r0 + i);
}

#define GEMV_FP8_ONE(NAME, R, NT, W)                                                                    \
    extern "C" __global__ void __launch_bounds__(32 * W)                                                \
        NAME(float* y, const float* x, const unsigned char* w, const float* s, int n, int k, int m) {   \
        gemv_fp8_rows<R, NT, W>(blockIdx.x, y, x, w, s, n, k, m);                                       \
    }
GEMV_FP8_ONE(gemv_fp8_n1, 4, 1, 4)
GEMV_FP8_ONE(gemv_fp8_n2, 4, 2, 4)
GEMV_FP8_ONE(gemv_fp8_n4, 4, 4, 4)
GEMV_FP8_ONE(gemv_fp8_n8, 4, 8, 4)

// dequant_bf16_fp8 writes rows rows of an FP8 weight (w and s at the first of them) as BF16
// into out ([rows][k]): one 16-byte unit a thread, over a grid-stride loop, each value the
// row's scale times the byte's, rounded once to BF16.
extern "C" __global__ void dequant_bf16_fp8(bf16* out, const unsigned char* w, const float* s, int rows, int k) {
    pdl_entry();
    long long perRow = k >> 4, total = (long long)rows * perRow;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / perRow;
        unsigned q[4];
        ld16a(w + 16 * i, q);
        float v[16];
        e4m3_unit(q, v);
        float sc = __ldg(s + r);
        unsigned p[8];
#pragma unroll
        for (int j = 0; j < 8; j++) p[j] = (unsigned)from_f32<bf16>(sc * v[2 * j]).x | ((unsigned)from_f32<bf16>(sc * v[2 * j + 1]).x << 16);
        uint4* o = (uint4*)(out + i * 16);
        o[0] = make_uint4(p[0], p[1], p[2], p[3]);
        o[1] = make_uint4(p[4], p[5], p[6], p[7]);
    }
}
