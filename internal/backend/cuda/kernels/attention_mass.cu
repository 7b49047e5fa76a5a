// Attention mass for the KV policies that rank the cache by it (h2o, snapkv): for each
// query token of one sequence and each query head, the softmax over the token's context of
// the scaled scores q.k, as the attention kernels weigh the values, added to
// mass[g * stride + j] for context entry j, g the head's KV head (one row per KV head, the
// query heads of a group summed). The cache layout is the attention kernels' ([numBlocks][blockSize]
// [kvHeads][headDim]); any head dim.

template <typename T>
__device__ __forceinline__ float attn_mass_score(const float* qp, const T* kc, const int* bt, int p, int kvHeads,
                                                 int kvh, int headDim, int blockSize, float scale) {
    long long slot = (long long)bt[p / blockSize] * blockSize + p % blockSize;
    const T* k = kc + (slot * kvHeads + kvh) * headDim;
    float d = 0.f;
    for (int i = 0; i < headDim; i++) d += qp[i] * to_f32(k[i]);
    return d * scale;
}

// attn_mass: grid (tokens, heads), block 128. Query token t (q row t) sits at context index
// ctx0 + t and attends to entries 0..ctx0+t; bt is the sequence's block table; stride is
// the length of a KV head's row of mass.
template <typename T>
__device__ void attn_mass(float* mass, int stride, const float* q, int qStride, const T* kc, const int* bt, int ctx0,
                          int heads, int kvHeads, int headDim, int blockSize, float scale) {
    pdl_entry();
    __shared__ float sh[32];
    int t = blockIdx.x, h = blockIdx.y;
    int n = ctx0 + t + 1, kvh = h / (heads / kvHeads);
    const float* qp = q + (long long)t * qStride + h * headDim;
    float m = -KV_INF;
    for (int p = threadIdx.x; p < n; p += blockDim.x)
        m = fmaxf(m, attn_mass_score(qp, kc, bt, p, kvHeads, kvh, headDim, blockSize, scale));
    m = block_max(m, sh);
    float l = 0.f;
    for (int p = threadIdx.x; p < n; p += blockDim.x)
        l += expf(attn_mass_score(qp, kc, bt, p, kvHeads, kvh, headDim, blockSize, scale) - m);
    l = block_sum(l, sh);
    float inv = 1.f / l;
    float* row = mass + (long long)kvh * stride;
    for (int p = threadIdx.x; p < n; p += blockDim.x)
        atomicAdd(&row[p], expf(attn_mass_score(qp, kc, bt, p, kvHeads, kvh, headDim, blockSize, scale) - m) * inv);
}
#define ATTN_MASS(NAME, T)                                                                                   \
    extern "C" __global__ void NAME(float* mass, int stride, const float* q, int qs, const T* kc, const int* bt, \
                                    int ctx0, int heads, int kvh, int hd, int bs, float scale) {                  \
        attn_mass(mass, stride, q, qs, kc, bt, ctx0, heads, kvh, hd, bs, scale);                                  \
    }
ATTN_MASS(attn_mass_f32, float)
ATTN_MASS(attn_mass_f16, f16)
ATTN_MASS(attn_mass_bf16, bf16)
