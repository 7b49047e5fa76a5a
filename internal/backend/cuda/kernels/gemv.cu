// Matrix-vector products for small batches (decode) and the bias add.

// gemv_rows: y[t][r] = sum_k x[t][k] * w[r][k] for n <= NT <= 8 (gemvMaxRows) token rows of float32 x and m
// weight rows of k 16-bit values (k a multiple of 8, rows 16-byte aligned). A block of
// GEMV_THREADS threads computes R weight rows: its threads split k in 16-byte chunks
// (thread i takes chunks i, i + GEMV_THREADS, ...), so every x chunk a thread loads serves
// all R rows and each thread keeps R independent 16-byte weight loads in flight; the
// partial sums meet through the warps' shuffles and shared memory. Blocks are small
// (R rows), so even m = 4096 fills every multiprocessor. blk is the block's index among
// the ceil(m / R) blocks of this weight.
//
// With GLU, the block also computes the same R rows of a second weight u of m rows (the
// up projection, w being the gate) and writes y[t][r] = silu(gate) * up: 2R rows in flight,
// and neither product reaches memory.
#define GEMV_THREADS 256

// ld_weights loads 16 bytes of a weight row; NOL1 asks the load not to allocate in L1, so
// the streaming weights leave the activations cached there.
template <bool NOL1>
__device__ __forceinline__ uint4 ld_weights(const uint4* p) {
    if (NOL1) {
        uint4 v;
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
            : "l"(p));
        return v;
    }
    return __ldg(p);
}

template <typename T, int R, int NT, bool NOL1, bool GLU>
__device__ __forceinline__ void gemv_rows(long long blk, float* __restrict__ y, const float* __restrict__ x,
                                          const T* __restrict__ w, const T* __restrict__ u, int n, int k, int m) {
    constexpr int RR = GLU ? 2 * R : R;  // weight rows loaded per block
    __shared__ float red[GEMV_THREADS / 32][RR * NT];
    long long r0 = blk * R;
    int chunks = k >> 3;
    const uint4* wr[RR];
#pragma unroll
    for (int i = 0; i < RR; i++) {
        int ri = i % R;
        long long r = r0 + ri < m ? r0 + ri : m - 1;  // rows past m repeat the last; not written
        wr[i] = (const uint4*)((i < R ? w : u) + r * k);
    }
    float acc[RR][NT];
#pragma unroll
    for (int i = 0; i < RR; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[i][t] = 0.f;
    // The weights do not depend on earlier kernels: the first chunk's loads are issued
    // before waiting for the kernel ahead (programmatic dependent launch), so they overlap
    // its tail.
    uint4 first[RR];
    if (threadIdx.x < chunks) {
#pragma unroll
        for (int i = 0; i < RR; i++) first[i] = ld_weights<NOL1>(wr[i] + threadIdx.x);
    }
    pdl_entry();
#pragma unroll 2
    for (int c = threadIdx.x; c < chunks; c += GEMV_THREADS) {
        uint4 pk[RR];
        if (c == threadIdx.x) {
#pragma unroll
            for (int i = 0; i < RR; i++) pk[i] = first[i];
        } else {
#pragma unroll
            for (int i = 0; i < RR; i++) pk[i] = ld_weights<NOL1>(wr[i] + c);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < n) {
                const float4* xp = (const float4*)(x + (long long)t * k + c * 8);
                float4 a = __ldg(xp), b = __ldg(xp + 1);
#pragma unroll
                for (int i = 0; i < RR; i++) {
                    T v[8];
                    unsigned int words[4] = {pk[i].x, pk[i].y, pk[i].z, pk[i].w};
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        v[2 * j].x = (unsigned short)(words[j] & 0xffffu);
                        v[2 * j + 1].x = (unsigned short)(words[j] >> 16);
                    }
                    acc[i][t] += to_f32(v[0]) * a.x + to_f32(v[1]) * a.y + to_f32(v[2]) * a.z + to_f32(v[3]) * a.w +
                                 to_f32(v[4]) * b.x + to_f32(v[5]) * b.y + to_f32(v[6]) * b.z + to_f32(v[7]) * b.w;
                }
            }
        }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if constexpr (NT == 1) {
#pragma unroll
        for (int i = 0; i < RR; i++) {
            float s = warp_sum(acc[i][0]);
            if (lane == 0) red[warp][i] = s;
        }
    } else {
        // Several token rows: the RR x NT sums meet in one reduce-scatter over the warp
        // (the same sums as warp_sum's, in far fewer shuffles).
        constexpr int V = RR * NT;
        constexpr int PER = 32 / V;  // lanes holding each sum
        float v[V];
#pragma unroll
        for (int i = 0; i < RR; i++)
#pragma unroll
            for (int t = 0; t < NT; t++) v[i * NT + t] = acc[i][t];
        float s = warp_sums<V>(v, lane);
        if (lane % PER == 0) red[warp][lane / PER] = s;
    }
    __syncthreads();
    int j = threadIdx.x;
    if (j < R * NT) {
        int i = j / NT, t = j % NT;
        if (t < n && r0 + i < m) {
            float s = 0.f;
#pragma unroll
            for (int q = 0; q < GEMV_THREADS / 32; q++) s += red[q][j];
            if (GLU) {
                float v = 0.f;
#pragma unroll
                for (int q = 0; q < GEMV_THREADS / 32; q++) v += red[q][j + R * NT];
                s = s / (1.f + expf(-s)) * v;
            }
            y[(long long)t * m + r0 + i] = s;
        }
    }
}

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
