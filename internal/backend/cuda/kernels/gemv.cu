// Matrix-vector products for small batches (decode) and the bias add.

#define GEMV_MAXN 8  // token rows one launch handles at most

// gemv: y[t][r] = sum_k x[t][k] * w[r][k] for n <= GEMV_MAXN token rows of float32 x and
// m weight rows of k 16-bit values (k a multiple of 8, rows 16-byte aligned). One warp
// computes one weight row for every token: each lane reads 8 weights (16 bytes) at a time,
// so the weight matrix is read once, coalesced. grid.x = ceil(m / warps per block).
template <typename T>
__device__ void gemv(float* y, const float* x, const T* w, int n, int k, int m) {
    int warps = blockDim.x >> 5;
    int lane = threadIdx.x & 31;
    long long r = (long long)blockIdx.x * warps + (threadIdx.x >> 5);
    if (r >= m) return;
    const uint4* wr = (const uint4*)(w + r * k);
    int chunks = k >> 3;
    float acc[GEMV_MAXN];
#pragma unroll
    for (int t = 0; t < GEMV_MAXN; t++) acc[t] = 0.f;
    for (int c = lane; c < chunks; c += 32) {
        uint4 pk = wr[c];
        unsigned int words[4] = {pk.x, pk.y, pk.z, pk.w};
        float wf[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            T lo, hi;
            lo.x = (unsigned short)(words[j] & 0xffffu);
            hi.x = (unsigned short)(words[j] >> 16);
            wf[2 * j] = to_f32(lo);
            wf[2 * j + 1] = to_f32(hi);
        }
#pragma unroll
        for (int t = 0; t < GEMV_MAXN; t++) {
            if (t < n) {
                const float4* xp = (const float4*)(x + (long long)t * k + c * 8);
                float4 a = xp[0], b = xp[1];
                acc[t] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w +
                          wf[4] * b.x + wf[5] * b.y + wf[6] * b.z + wf[7] * b.w;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < GEMV_MAXN; t++) {
        if (t < n) {
            float s = warp_sum(acc[t]);
            if (lane == 0) y[(long long)t * m + r] = s;
        }
    }
}
extern "C" __global__ void gemv_bf16(float* y, const float* x, const bf16* w, int n, int k, int m) { gemv(y, x, w, n, k, m); }
extern "C" __global__ void gemv_f16(float* y, const float* x, const f16* w, int n, int k, int m) { gemv(y, x, w, n, k, m); }

// add_bias_f32: x[r][c] += bias[c] over rows x cols values; grid-stride.
extern "C" __global__ void add_bias_f32(float* x, const float* bias, long long rows, int cols) {
    long long n = rows * cols;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] += bias[i % cols];
}

// attn_small_f32: plain causal attention over the paged cache for head sizes the tiled
// kernels do not take (any headDim <= 256). grid = (heads, tokens), dynamic shared memory
// holds the token's scores (positions 0..pos). Token t belongs to the sequence s with
// seqStarts[s] <= t < seqStarts[s+1].
template <typename T>
__device__ void attn_small(float* out, const float* q, const T* kc, const T* vc, const int* bt, int maxBlocks,
                           const int* seqStarts, int seqs, const int* pos, int heads, int kvHeads, int headDim,
                           int blockSize, float scale) {
    extern __shared__ float sc[];
    __shared__ float red[32];
    int h = blockIdx.x;
    long long t = blockIdx.y;
    int s = 0;
    while (s + 1 < seqs && seqStarts[s + 1] <= t) s++;
    int n = pos[t] + 1;
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
                                    const int* ss, int seqs, const int* pos, int heads, int kvh, int hd,      \
                                    int bs, float scale) {                                                    \
        attn_small(o, q, kc, vc, bt, mb, ss, seqs, pos, heads, kvh, hd, bs, scale);                           \
    }
ATTN_SMALL(attn_small_f32, float)
ATTN_SMALL(attn_small_f16, f16)
ATTN_SMALL(attn_small_bf16, bf16)
