// Paged attention for multi-head latent attention's cache (DeepSeek-V2/V3): head vectors
// wider than attention.cu's kernels take (up to 576 values: the rotated key and the
// latent), whose values are the keys themselves (the cache holds each vector once), and
// many query heads over one kv head. One kernel serves prefill chunks, decode tokens and
// speculative verification: a block takes MLA_ROWS (query token, head) rows, MLA_ROWS /
// hg tokens of one sequence times hg heads of one kv head, so that each tile of keys it
// loads serves them all; long contexts are split over blocks (split-K) and the splits
// merged by attn_combine (attention.cu).

#define MLA_MAXC 18     // head dim / 32 at most (576)
#define MLA_ROWS 16     // (token, head) rows of a block: 8 warps x 2
#define MLA_RW 2        // rows a warp
#define MLA_KT 16       // positions a shared-memory tile
#define MLA_THREADS 256

// mla_store writes v at out[i] as kind says (0 F32, 1 F16, 2 BF16).
__device__ __forceinline__ void mla_store(void* out, long long i, int kind, float v) {
    if (kind == 0)
        ((float*)out)[i] = v;
    else if (kind == 1)
        ((f16*)out)[i] = from_f32<f16>(v);
    else
        ((bf16*)out)[i] = from_f32<bf16>(v);
}

// mla_unpack widens the elements of a 16-byte load (4 float32, or 8 bf16 or f16 values) to
// float32, by their bits (the pointer's type picks the overload).
__device__ __forceinline__ void mla_unpack(const uint4& u, float* f, const float*) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
}
__device__ __forceinline__ void mla_unpack(const uint4& u, float* f, const bf16*) {
    unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void mla_unpack(const uint4& u, float* f, const f16*) {
    unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f16 lo, hi;
        lo.x = (unsigned short)(w[i] & 0xffffu);
        hi.x = (unsigned short)(w[i] >> 16);
        f[2 * i] = to_f32(lo);
        f[2 * i + 1] = to_f32(hi);
    }
}

// mla_load_tile loads positions k0 .. k0+MLA_KT-1 of kv head kvh (those before end; zeros
// after) through the block table bt into ks as float32, with 16-byte loads and stores
// spread over the block (between barriers). headDim is a multiple of 32, so every row
// starts on 16 bytes.
template <typename T>
__device__ __forceinline__ void mla_load_tile(float (*ks)[MLA_MAXC * 32], const T* kc, const int* bt, int k0, int end,
                                              int blockSize, int kvHeads, int kvh, int headDim) {
    constexpr int E = 16 / sizeof(T);  // elements a 16-byte load
    int vpr = headDim / E;             // loads a row
    for (int e = threadIdx.x; e < MLA_KT * vpr; e += MLA_THREADS) {
        int j = e / vpr, c = (e - j * vpr) * E;
        int p = k0 + j;
        float f[E];
        if (p < end) {
            long long slot = (long long)bt[p / blockSize] * blockSize + p % blockSize;
            mla_unpack(*(const uint4*)(kc + (slot * kvHeads + kvh) * headDim + c), f, kc);
        } else {
#pragma unroll
            for (int i = 0; i < E; i++) f[i] = 0.f;
        }
#pragma unroll
        for (int i = 0; i < E; i += 4) *(float4*)&ks[j][c + i] = float4{f[i], f[i + 1], f[i + 2], f[i + 3]};
    }
}

// attn_mla: grid ((heads / hg) x chunks, splits, seqs), block MLA_THREADS. Sequence s
// owns query tokens [seqStarts[s], seqStarts[s+1]) of q (row t at t*qStride, head h at
// h*headDim) and out; its i-th token of qlen sits at context index ctxLens[s]-qlen+i and
// attends to the context's positions 0..that index through its block table. blockIdx.x
// is hgi * chunks + chunk: the block's rows are tokens chunk*tq .. chunk*tq+tq-1 of the
// sequence (tq = MLA_ROWS / hg) times heads hgi*hg .. hgi*hg+hg-1 (hg divides the query
// heads of a kv head). Split x = blockIdx.y covers positions [x*splitLen, (x+1)*splitLen).
// The values are the keys (one tile serves both). With one split a row's output goes to
// out (type outKind, mla_store); with more, its running max, sum and unnormalized output
// go to pm, pl and po at row (t*heads + h)*splits + x, t the token's index in q (an empty
// split's max -inf, sum 0), for attn_combine over (heads, tokens).
template <typename T>
__device__ void attn_mla(void* out, int outStride, int outKind, const float* q, int qStride, const T* kc,
                         const int* blockTables, int maxBlocks, const int* seqStarts, const int* ctxLens, float* pm,
                         float* pl, float* po, int heads, int kvHeads, int headDim, int blockSize, int splitLen,
                         float scale, int hg, int chunks) {
    __shared__ __align__(16) float ks[MLA_KT][MLA_MAXC * 32];
    int split = blockIdx.y, chunk = blockIdx.x % chunks, hgi = blockIdx.x / chunks, s = blockIdx.z;
    int splits = gridDim.y;
    int tq = MLA_ROWS / hg;
    int q0 = seqStarts[s], qlen = seqStarts[s + 1] - q0;
    if (chunk * tq >= qlen) return;
    int c0 = ctxLens[s] - qlen;  // the context index of the sequence's first query token
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int nc = headDim >> 5;
    int kvh = hgi * hg / (heads / kvHeads);
    const int* bt = blockTables + (long long)s * maxBlocks;

    float qr[MLA_RW][MLA_MAXC], acc[MLA_RW][MLA_MAXC], m[MLA_RW], l[MLA_RW];
    int qpos[MLA_RW], tok[MLA_RW], head[MLA_RW];
#pragma unroll
    for (int i = 0; i < MLA_RW; i++) {
        int r = w * MLA_RW + i;
        int t = chunk * tq + r / hg;
        head[i] = hgi * hg + r % hg;
        tok[i] = q0 + t;
        qpos[i] = t < qlen ? c0 + t : -1;
        const float* qp = q + (long long)(q0 + (t < qlen ? t : 0)) * qStride + head[i] * headDim;
#pragma unroll
        for (int c = 0; c < MLA_MAXC; c++) {
            qr[i][c] = (qpos[i] >= 0 && c < nc) ? qp[lane + 32 * c] * scale : 0.f;
            acc[i][c] = 0.f;
        }
        m[i] = -KV_INF;
        l[i] = 0.f;
    }
    int kmax = c0 + min(qlen, (chunk + 1) * tq) - 1;  // the block's last position
    int start = split * splitLen, end = min(kmax + 1, start + splitLen);
    for (int k0 = start; k0 < end; k0 += MLA_KT) {
        __syncthreads();
        mla_load_tile(ks, kc, bt, k0, end, blockSize, kvHeads, kvh, headDim);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < MLA_RW; i++) {
            if (qpos[i] < k0) continue;  // warp-uniform: the row sees none of the tile
            float part[MLA_KT];
#pragma unroll
            for (int j = 0; j < MLA_KT; j++) {
                float d = 0.f;
#pragma unroll
                for (int c = 0; c < MLA_MAXC; c++)
                    if (c < nc) d += qr[i][c] * ks[j][lane + 32 * c];
                part[j] = d;
            }
            // Lanes 2j and 2j+1 hold position k0+j's score.
            float sc = warp_sums<MLA_KT>(part, lane);
            int p = k0 + (lane >> 1);
            bool seen = p < end && p <= qpos[i];
            sc = seen ? sc : -KV_INF;
            float mn = fmaxf(m[i], warp_max(sc));
            float corr = expf(m[i] - mn);
            float e = seen ? expf(sc - mn) : 0.f;
            l[i] = l[i] * corr + warp_sum((lane & 1) ? 0.f : e);
#pragma unroll
            for (int c = 0; c < MLA_MAXC; c++) acc[i][c] *= corr;
#pragma unroll
            for (int j = 0; j < MLA_KT; j++) {
                float pj = __shfl_sync(0xffffffffu, e, 2 * j);
#pragma unroll
                for (int c = 0; c < MLA_MAXC; c++)
                    if (c < nc) acc[i][c] += pj * ks[j][lane + 32 * c];
            }
            m[i] = mn;
        }
    }
#pragma unroll
    for (int i = 0; i < MLA_RW; i++) {
        if (qpos[i] < 0) continue;
        if (splits == 1) {
            float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
            long long o = (long long)tok[i] * outStride + head[i] * headDim;
            for (int c = 0; c < nc; c++) mla_store(out, o + lane + 32 * c, outKind, acc[i][c] * inv);
            continue;
        }
        long long row = ((long long)tok[i] * heads + head[i]) * splits + split;
        if (lane == 0) {
            pm[row] = m[i];  // -inf for a split the row does not reach
            pl[row] = l[i];
        }
        for (int c = 0; c < nc; c++) po[row * headDim + lane + 32 * c] = acc[i][c];
    }
}

// Instances are named attn_mla_<cache>.
#define ATTN_MLA(NAME, T)                                                                                    \
    extern "C" __global__ void __launch_bounds__(MLA_THREADS)                                                \
        NAME(void* out, int os, int ok, const float* q, int qs, const T* kc, const int* bt, int maxBlocks,   \
             const int* starts, const int* ctxLens, float* pm, float* pl, float* po, int heads, int kvh,     \
             int hd, int bs, int splitLen, float scale, int hg, int chunks) {                                \
        attn_mla<T>(out, os, ok, q, qs, kc, bt, maxBlocks, starts, ctxLens, pm, pl, po, heads, kvh, hd, bs, \
                    splitLen, scale, hg, chunks);                                                            \
    }
ATTN_MLA(attn_mla_f32, float)
ATTN_MLA(attn_mla_f16, f16)
ATTN_MLA(attn_mla_bf16, bf16)
