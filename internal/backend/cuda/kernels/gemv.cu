// The 16-bit GEMV kernels (gemv_rows of gemv.cuh per weight type and token bucket), the bias
// add, and the attention of short sequences.

// The production GEMV kernels, one per bucket of token rows (n <= 1, 2, 4, 8); the launch
// (Backend.matMul) picks the bucket and grid.x = ceil(m / rows per block) (gemvKernel).
#define GEMV_KERNEL(NAME, T, R, NT, NOL1)                                                                         \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS) NAME(float* y, const float* x, const T* w, int n, \
                                                                    int k, int m) {                            \
        gemv_rows<T, R, NT, NOL1, false>(blockIdx.x, y, x, w, w, n, k, m);                                      \
    }
GEMV_KERNEL(gemv_n1_bf16, bf16, 8, 1, false)
GEMV_KERNEL(gemv_n2_bf16, bf16, 4, 2, true)
GEMV_KERNEL(gemv_n4_bf16, bf16, 4, 4, true)
GEMV_KERNEL(gemv_n8_bf16, bf16, 4, 8, true)
GEMV_KERNEL(gemv_n1_f16, f16, 8, 1, false)
GEMV_KERNEL(gemv_n2_f16, f16, 4, 2, true)
GEMV_KERNEL(gemv_n4_f16, f16, 4, 4, true)
GEMV_KERNEL(gemv_n8_f16, f16, 4, 8, true)

// gemvm_*: up to three GEMVs over one x in one launch (a layer's q, k and v projections):
// y_i = x · w_iᵀ for weights of m_i rows (m1, m2 may be 0). The grid covers the
// concatenated rows: grid.x = ceil(m0/R) + ceil(m1/R) + ceil(m2/R), and each block finds
// its weight from its index.
#define GEMVM_KERNEL(NAME, T, R, NT, NOL1)                                                                       \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                                  \
        NAME(float* y0, float* y1, float* y2, const float* x, const T* w0, const T* w1, const T* w2, int n,     \
             int k, int m0, int m1, int m2) {                                                                   \
        long long blk = blockIdx.x, b0 = (m0 + R - 1) / R, b1 = (m1 + R - 1) / R;                              \
        if (blk < b0)                                                                                           \
            gemv_rows<T, R, NT, NOL1, false>(blk, y0, x, w0, w0, n, k, m0);                                     \
        else if (blk < b0 + b1)                                                                                 \
            gemv_rows<T, R, NT, NOL1, false>(blk - b0, y1, x, w1, w1, n, k, m1);                                \
        else                                                                                                    \
            gemv_rows<T, R, NT, NOL1, false>(blk - b0 - b1, y2, x, w2, w2, n, k, m2);                           \
    }
GEMVM_KERNEL(gemvm_n1_bf16, bf16, 8, 1, false)
GEMVM_KERNEL(gemvm_n2_bf16, bf16, 4, 2, true)
GEMVM_KERNEL(gemvm_n4_bf16, bf16, 4, 4, true)
GEMVM_KERNEL(gemvm_n8_bf16, bf16, 4, 8, true)
GEMVM_KERNEL(gemvm_n1_f16, f16, 8, 1, false)
GEMVM_KERNEL(gemvm_n2_f16, f16, 4, 2, true)
GEMVM_KERNEL(gemvm_n4_f16, f16, 4, 4, true)
GEMVM_KERNEL(gemvm_n8_f16, f16, 4, 8, true)

// gemvglu_*: y = silu(x · gateᵀ) * (x · upᵀ) for gate and up of m rows each; a block takes R
// rows of both (2R rows in flight, as many as the plain kernel of its bucket), grid.x =
// ceil(m / R).
#define GEMVGLU_KERNEL(NAME, T, R, NT, NOL1)                                                                      \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS) NAME(float* y, const float* x, const T* gate,     \
                                                                    const T* up, int n, int k, int m) {         \
        gemv_rows<T, R, NT, NOL1, true>(blockIdx.x, y, x, gate, up, n, k, m);                                   \
    }
GEMVGLU_KERNEL(gemvglu_n1_bf16, bf16, 1, 1, false)
GEMVGLU_KERNEL(gemvglu_n2_bf16, bf16, 2, 2, true)
GEMVGLU_KERNEL(gemvglu_n4_bf16, bf16, 2, 4, true)
GEMVGLU_KERNEL(gemvglu_n8_bf16, bf16, 2, 8, true)
GEMVGLU_KERNEL(gemvglu_n1_f16, f16, 1, 1, false)
GEMVGLU_KERNEL(gemvglu_n2_f16, f16, 2, 2, true)
GEMVGLU_KERNEL(gemvglu_n4_f16, f16, 2, 4, true)
GEMVGLU_KERNEL(gemvglu_n8_f16, f16, 2, 8, true)
// add_bias_f32: x[r][c] += bias[c] over rows x cols values; grid-stride.
extern "C" __global__ void add_bias_f32(float* x, const float* bias, long long rows, int cols) {
    pdl_entry();
    long long n = rows * cols;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] += bias[i % cols];
}

// attn_small_f32: plain causal attention over the paged cache for head sizes the tiled
// kernels do not take (any headDim <= 256). grid = (heads, tokens), dynamic shared memory
// holds the token's scores. Token t belongs to the sequence s with seqStarts[s] <= t <
// seqStarts[s+1]; the sequence's last token is at index ctxLens[s]-1 of its context, and a
// token attends to the context's positions 0..its own index.
template <typename T>
__device__ void attn_small(float* out, const float* q, const T* kc, const T* vc, const int* bt, int maxBlocks,
                           const int* seqStarts, int seqs, const int* ctxLens, int heads, int kvHeads, int headDim,
                           int blockSize, float scale) {
    extern __shared__ float sc[];
    __shared__ float red[32];
    int h = blockIdx.x;
    long long t = blockIdx.y;
    int s = 0;
    while (s + 1 < seqs && seqStarts[s + 1] <= t) s++;
    int n = ctxLens[s] - (seqStarts[s + 1] - (int)t) + 1;
    int kvh = h / (heads / kvHeads);
    const float* qh = q + t * heads * headDim + h * headDim;
    const int* table = bt + (long long)s * maxBlocks;
    float mx = -KV_INF;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        long long slot = (long long)table[j / blockSize] * blockSize + j % blockSize;
        const T* k = kc + (slot * kvHeads + kvh) * headDim;
        float d = 0.f;
        for (int i = 0; i < headDim; i++) d += qh[i] * to_f32(k[i]);
        d *= scale;
        sc[j] = d;
        mx = fmaxf(mx, d);
    }
    mx = block_max(mx, red);
    float sum = 0.f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float e = expf(sc[j] - mx);
        sc[j] = e;
        sum += e;
    }
    sum = block_sum(sum, red);
    __syncthreads();
    float* o = out + t * heads * headDim + h * headDim;
    for (int i = threadIdx.x; i < headDim; i += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < n; j++) {
            long long slot = (long long)table[j / blockSize] * blockSize + j % blockSize;
            acc += sc[j] * to_f32(vc[(slot * kvHeads + kvh) * headDim + i]);
        }
        o[i] = acc / sum;
    }
}
#define ATTN_SMALL(NAME, T)                                                                                   \
    extern "C" __global__ void NAME(float* o, const float* q, const T* kc, const T* vc, const int* bt, int mb, \
                                    const int* ss, int seqs, const int* cl, int heads, int kvh, int hd,       \
                                    int bs, float scale) {                                                    \
        attn_small(o, q, kc, vc, bt, mb, ss, seqs, cl, heads, kvh, hd, bs, scale);                            \
    }
ATTN_SMALL(attn_small_f32, float)
ATTN_SMALL(attn_small_f16, f16)
ATTN_SMALL(attn_small_bf16, bf16)
