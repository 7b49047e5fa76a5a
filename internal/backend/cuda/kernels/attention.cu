// Paged attention: split-K flash-decoding for one query per sequence, and a tiled
// flash-attention prefill over variable-length query chunks. The cache of one layer is
// [numBlocks][blockSize][kvHeads][headDim]; blockTables is [seqs][maxBlocks]; query head h
// reads kv head h / (heads / kvHeads). headDim is a multiple of 32, at most 256.

#define ATT_MAXC 8  // headDim / 32 at most

// attn_decode: grid (splits, heads, seqs), block 128 (4 warps). Sequence s attends to
// cache positions [0, ctxLens[s]); split x covers [x*splitLen, (x+1)*splitLen). Each
// block writes the split's running max, sum and unnormalized output to pm, pl, po
// ([seqs][heads][splits] and [...][headDim]); attn_combine merges them.
template <typename T>
__device__ void attn_decode(const float* q, int qStride, const T* kc, const T* vc, const int* blockTables,
                            int maxBlocks, const int* ctxLens, float* pm, float* pl, float* po, int heads,
                            int kvHeads, int headDim, int blockSize, int splitLen, float scale) {
    pdl_entry();
    __shared__ float swm[4], swl[4];
    __shared__ float sacc[4][256];
    int split = blockIdx.x, h = blockIdx.y, s = blockIdx.z, splits = gridDim.x;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int nc = headDim >> 5;
    int kvh = h / (heads / kvHeads);
    int ctx = ctxLens[s];
    int start = split * splitLen, end = min(ctx, start + splitLen);
    const float* qp = q + (long long)s * qStride + h * headDim;
    float qr[ATT_MAXC], acc[ATT_MAXC];
#pragma unroll
    for (int c = 0; c < ATT_MAXC; c++) {
        qr[c] = c < nc ? qp[lane + 32 * c] * scale : 0.f;
        acc[c] = 0.f;
    }
    float m = -KV_INF, l = 0.f;
    const int* bt = blockTables + (long long)s * maxBlocks;
    for (int p = start + w; p < end; p += nw) {
        long long slot = (long long)bt[p / blockSize] * blockSize + p % blockSize;
        long long base = (slot * kvHeads + kvh) * headDim;
        float d = 0.f;
#pragma unroll
        for (int c = 0; c < ATT_MAXC; c++)
            if (c < nc) d += qr[c] * to_f32(kc[base + lane + 32 * c]);
        d = warp_sum(d);
        float mn = fmaxf(m, d);
        float corr = expf(m - mn), e = expf(d - mn);
        l = l * corr + e;
#pragma unroll
        for (int c = 0; c < ATT_MAXC; c++)
            if (c < nc) acc[c] = acc[c] * corr + e * to_f32(vc[base + lane + 32 * c]);
        m = mn;
    }
    if (lane == 0) {
        swm[w] = m;
        swl[w] = l;
    }
    for (int c = 0; c < nc; c++) sacc[w][lane + 32 * c] = acc[c];
    __syncthreads();
    float M = -KV_INF;
    for (int i = 0; i < nw; i++) M = fmaxf(M, swm[i]);
    long long row = ((long long)s * heads + h) * splits + split;
    if (M == -KV_INF) {  // empty split
        if (threadIdx.x == 0) {
            pm[row] = -KV_INF;
            pl[row] = 0.f;
        }
        for (int d = threadIdx.x; d < headDim; d += blockDim.x) po[row * headDim + d] = 0.f;
        return;
    }
    for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
        float o = 0.f;
        for (int i = 0; i < nw; i++)
            if (swm[i] != -KV_INF) o += sacc[i][d] * expf(swm[i] - M);
        po[row * headDim + d] = o;
    }
    if (threadIdx.x == 0) {
        float L = 0.f;
        for (int i = 0; i < nw; i++)
            if (swm[i] != -KV_INF) L += swl[i] * expf(swm[i] - M);
        pm[row] = M;
        pl[row] = L;
    }
}
#define ATTN_DECODE(NAME, T)                                                                              \
    extern "C" __global__ void NAME(const float* q, int qs, const T* kc, const T* vc, const int* bt,       \
                                    int maxBlocks, const int* ctx, float* pm, float* pl, float* po,       \
                                    int heads, int kvh, int hd, int bs, int splitLen, float scale) {      \
        attn_decode(q, qs, kc, vc, bt, maxBlocks, ctx, pm, pl, po, heads, kvh, hd, bs, splitLen, scale); \
    }
ATTN_DECODE(attn_decode_f32, float)
ATTN_DECODE(attn_decode_f16, f16)
ATTN_DECODE(attn_decode_bf16, bf16)

#define GQA_MAXG 8  // query heads per kv head the grouped decode kernel takes at most

// attn_decode_gqa: the split-K decode of attn_decode for all G = heads/kvHeads query heads
// of one kv head at once, so that each cached key and value is read once per group
// instead of once per query head. grid (splits, kvHeads, seqs), block 128 (4 warps);
// headDim == 32*NC, G <= GQA_MAXG. Writes the same partial results as attn_decode.
template <typename T, int NC>
__device__ void attn_decode_gqa(const float* q, int qStride, const T* kc, const T* vc, const int* blockTables,
                                int maxBlocks, const int* ctxLens, float* pm, float* pl, float* po, int heads,
                                int kvHeads, int blockSize, int splitLen, float scale) {
    pdl_entry();
    const int headDim = 32 * NC;
    __shared__ float swm[4][GQA_MAXG], swl[4][GQA_MAXG];
    __shared__ float sacc[4][GQA_MAXG * 32 * NC];
    int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z, splits = gridDim.x;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int G = heads / kvHeads;
    int ctx = ctxLens[s];
    int start = split * splitLen, end = min(ctx, start + splitLen);
    float qr[GQA_MAXG][NC], acc[GQA_MAXG][NC], m[GQA_MAXG], l[GQA_MAXG];
    const float* qp = q + (long long)s * qStride + (long long)kvh * G * headDim;
#pragma unroll
    for (int g = 0; g < GQA_MAXG; g++) {
#pragma unroll
        for (int c = 0; c < NC; c++) {
            qr[g][c] = g < G ? qp[g * headDim + lane + 32 * c] * scale : 0.f;
            acc[g][c] = 0.f;
        }
        m[g] = -KV_INF;
        l[g] = 0.f;
    }
    const int* bt = blockTables + (long long)s * maxBlocks;
    for (int p = start + w; p < end; p += 4) {
        long long slot = (long long)bt[p / blockSize] * blockSize + p % blockSize;
        long long base = (slot * kvHeads + kvh) * headDim;
        float kf[NC], vf[NC];
#pragma unroll
        for (int c = 0; c < NC; c++) {
            kf[c] = to_f32(kc[base + lane + 32 * c]);
            vf[c] = to_f32(vc[base + lane + 32 * c]);
        }
        float d[GQA_MAXG];
#pragma unroll
        for (int g = 0; g < GQA_MAXG; g++) {
            d[g] = 0.f;
            if (g < G) {
#pragma unroll
                for (int c = 0; c < NC; c++) d[g] += qr[g][c] * kf[c];
                d[g] = warp_sum(d[g]);
            }
        }
#pragma unroll
        for (int g = 0; g < GQA_MAXG; g++) {
            if (g < G) {
                float mn = fmaxf(m[g], d[g]);
                float corr = expf(m[g] - mn), e = expf(d[g] - mn);
                l[g] = l[g] * corr + e;
#pragma unroll
                for (int c = 0; c < NC; c++) acc[g][c] = acc[g][c] * corr + e * vf[c];
                m[g] = mn;
            }
        }
    }
#pragma unroll
    for (int g = 0; g < GQA_MAXG; g++) {
        if (g < G) {
            if (lane == 0) {
                swm[w][g] = m[g];
                swl[w][g] = l[g];
            }
#pragma unroll
            for (int c = 0; c < NC; c++) sacc[w][g * headDim + lane + 32 * c] = acc[g][c];
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * headDim; i += blockDim.x) {
        int g = i / headDim, dd = i % headDim;
        long long row = ((long long)s * heads + kvh * G + g) * splits + split;
        float M = -KV_INF;
        for (int wi = 0; wi < 4; wi++) M = fmaxf(M, swm[wi][g]);
        if (M == -KV_INF) {  // empty split
            po[row * headDim + dd] = 0.f;
            if (dd == 0) {
                pm[row] = -KV_INF;
                pl[row] = 0.f;
            }
            continue;
        }
        float o = 0.f, L = 0.f;
        for (int wi = 0; wi < 4; wi++)
            if (swm[wi][g] != -KV_INF) {
                float f = expf(swm[wi][g] - M);
                o += sacc[wi][g * headDim + dd] * f;
                L += swl[wi][g] * f;
            }
        po[row * headDim + dd] = o;
        if (dd == 0) {
            pm[row] = M;
            pl[row] = L;
        }
    }
}
#define ATTN_DECODE_GQA(NAME, T, NC)                                                                        \
    extern "C" __global__ void NAME(const float* q, int qs, const T* kc, const T* vc, const int* bt,         \
                                    int maxBlocks, const int* ctx, float* pm, float* pl, float* po,         \
                                    int heads, int kvh, int bs, int splitLen, float scale) {                \
        attn_decode_gqa<T, NC>(q, qs, kc, vc, bt, maxBlocks, ctx, pm, pl, po, heads, kvh, bs, splitLen, scale); \
    }
ATTN_DECODE_GQA(attn_decode_gqa2_f32, float, 2)
ATTN_DECODE_GQA(attn_decode_gqa2_f16, f16, 2)
ATTN_DECODE_GQA(attn_decode_gqa2_bf16, bf16, 2)
ATTN_DECODE_GQA(attn_decode_gqa4_f32, float, 4)
ATTN_DECODE_GQA(attn_decode_gqa4_f16, f16, 4)
ATTN_DECODE_GQA(attn_decode_gqa4_bf16, bf16, 4)

// ---- Grouped decode for many sequences ----
// attn_decode_grp: one block of 128 threads per (split, kv head, sequence) serving all G =
// heads/kvHeads query heads of the kv head (G = 1, 2, 4 or 8), head size HD (64 or 128).
// Tiles of DG_TP positions of K and V come through the block table with 16-byte loads
// into shared memory (each cached value is read once per group); warp w scores heads
// w, w+4 (lane = position) with an online softmax in base 2, and thread t accumulates
// output dimension t % HD of heads t / HD, t / HD + 128/HD, ... With one split the
// normalized output is written straight to out (outKind 0 f32, 1 f16, 2 bf16; a sequence
// with no context gets zeros); with more, the split's partial results go to pm, pl, po
// (as attn_decode writes them) and the last block of a (kv head, sequence) to finish —
// counted in done[s * kvHeads + kvh], which it resets to zero for the next launch — merges
// the splits of its G heads into out as attn_combine would, in split order, so no combine
// launch follows.

#define DG_TP 32        // positions per tile
#define DG_THREADS 128  // threads per block
#define DG_MAX_SPLITS 64  // most splits of one launch (decodeMaxSplits)

__device__ __forceinline__ void dg_unpack(const uint4& u, float* f, const float*) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
}
__device__ __forceinline__ void dg_unpack(const uint4& u, float* f, const bf16*) {
    unsigned int w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void dg_unpack(const uint4& u, float* f, const f16*) {
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

__device__ __forceinline__ void dg_store(void* out, long long i, int kind, float v) {
    if (kind == 0)
        ((float*)out)[i] = v;
    else if (kind == 1)
        ((f16*)out)[i] = from_f32<f16>(v);
    else
        ((bf16*)out)[i] = from_f32<bf16>(v);
}

// dg_load_tile loads positions k0 .. k0+n-1 of kv head kvh, through the block table bt,
// into the K tile (rows of KLD elements) and the V tile (rows of HD), zeros in rows n ..
// DG_TP-1, with 16-byte loads spread over the block (between barriers).
template <typename T, int HD, int KLD>
__device__ __forceinline__ void dg_load_tile(T* sK, T* sV, const T* kc, const T* vc, const int* bt, int k0, int n,
                                             int blockSize, int kvHeads, int kvh) {
    constexpr int E = 16 / sizeof(T);  // elements per 16-byte vector
    constexpr int VPR = HD / E;        // vectors per row
#pragma unroll
    for (int e = threadIdx.x; e < DG_TP * VPR; e += DG_THREADS) {
        int j = e / VPR, c = (e - j * VPR) * E;
        uint4 kv = {0u, 0u, 0u, 0u}, vv = {0u, 0u, 0u, 0u};
        if (j < n) {
            int p = k0 + j;
            long long slot = (long long)bt[p / blockSize] * blockSize + p % blockSize;
            long long idx = (slot * kvHeads + kvh) * HD + c;
            kv = *(const uint4*)(kc + idx);
            vv = *(const uint4*)(vc + idx);
        }
        *(uint4*)&sK[j * KLD + c] = kv;
        *(uint4*)&sV[j * HD + c] = vv;
    }
}

// dg_dot returns the score of the K tile row kr against the scaled query qg (HD values in
// shared memory), summed in two halves: the one dot product of every grouped decode kernel.
template <typename T, int HD>
__device__ __forceinline__ float dg_dot(const T* kr, const float* qg) {
    constexpr int E = 16 / sizeof(T);
    float d0 = 0.f, d1 = 0.f;
#pragma unroll
    for (int c = 0; c < HD; c += E) {
        float kf[E];
        dg_unpack(*(const uint4*)(kr + c), kf, kr);
#pragma unroll
        for (int i = 0; i < E; i += 4) {
            float4 qv = *(const float4*)(qg + c + i);
            d0 += qv.x * kf[i] + qv.y * kf[i + 1];
            d1 += qv.z * kf[i + 2] + qv.w * kf[i + 3];
        }
    }
    return d0 + d1;
}

// dg_merge_weights turns the partial maxima of one row's splits (m[i * stride], natural
// units, -inf for an empty split) into their weights exp(m_i - M) (0 for empty splits) in
// place, and returns the merged sum of the partial sums l[i * stride], in split order.
__device__ __forceinline__ float dg_merge_weights(float* m, const float* l, int stride, int splits) {
    float M = -KV_INF;
    for (int i = 0; i < splits; i++) M = fmaxf(M, m[i * stride]);
    float L = 0.f;
    for (int i = 0; i < splits; i++) {
        float mi = m[i * stride], e = 0.f;
        if (M != -KV_INF && mi != -KV_INF) {
            e = expf(mi - M);
            L += l[i * stride] * e;
        }
        m[i * stride] = e;
    }
    return L;
}

// dg_merge_out returns dimension d of one row's merged output: its splits' partial outputs
// (po rows row0 .. row0+splits-1 of HD, read through L2) weighted by e[i * stride] and
// summed in split order, over L (0 when L is 0).
template <int HD>
__device__ __forceinline__ float dg_merge_out(const float* po, long long row0, int d, const float* e, int stride,
                                              int splits, float L) {
    float v = 0.f;
    if (L > 0.f) {
#pragma unroll 8
        for (int i = 0; i < splits; i++) v += __ldcg(po + (row0 + i) * HD + d) * e[i * stride];
        v /= L;
    }
    return v;
}

template <typename T, int HD, int G>
__device__ void attn_decode_grp(void* out, int outStride, int outKind, const float* q, int qStride, const T* kc,
                                const T* vc, const int* blockTables, int maxBlocks, const int* ctxLens, float* pm,
                                float* pl, float* po, int* done, int heads, int kvHeads, int blockSize,
                                int splitLen, float scale) {
    constexpr int E = 16 / sizeof(T);  // elements per 16-byte vector
    constexpr int KLD = HD + E;        // K row stride: 16 bytes of padding keep lanes on distinct banks
    constexpr int HG = DG_THREADS / HD;  // head groups of the PV phase (1 or 2)
    constexpr int NA = (G + HG - 1) / HG;  // accumulators per thread
    constexpr int NW = (G + 3) / 4;        // heads per warp in the score phase
    __shared__ __align__(16) float sQ[G * HD];
    __shared__ __align__(16) T sK[DG_TP * KLD];
    __shared__ __align__(16) T sV[DG_TP * HD];
    __shared__ __align__(16) float sP[DG_TP][G];
    __shared__ float sCorr[G], sM[G], sL[G];
    __shared__ int sLast;
    pdl_entry();
    int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z, splits = gridDim.x;
    int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    int ctx = ctxLens[s];
    int start = split * splitLen, end = min(ctx, start + splitLen);
    const float qscale = scale * 1.4426950408889634f;  // scores in base 2
    const float* qp = q + (long long)s * qStride + (long long)kvh * G * HD;
    for (int i = tid; i < G * HD; i += DG_THREADS) sQ[i] = qp[i] * qscale;
    float mreg[NW], lreg[NW];
#pragma unroll
    for (int k = 0; k < NW; k++) {
        mreg[k] = -KV_INF;
        lreg[k] = 0.f;
    }
    int d = tid % HD, g0 = HG == 1 ? 0 : tid / HD;
    float acc[NA];
#pragma unroll
    for (int a = 0; a < NA; a++) acc[a] = 0.f;
    const int* bt = blockTables + (long long)s * maxBlocks;

    for (int k0 = start; k0 < end; k0 += DG_TP) {
        int n = min(DG_TP, end - k0);
        __syncthreads();  // the previous tile is consumed (and sQ written)
        dg_load_tile<T, HD, KLD>(sK, sV, kc, vc, bt, k0, n, blockSize, kvHeads, kvh);
        __syncthreads();
        // Scores and the online softmax: warp w owns heads w + 4k, lane j position k0 + j.
#pragma unroll
        for (int k = 0; k < NW; k++) {
            int g = w + 4 * k;
            if (g < G) {
                float sc = -KV_INF;
                if (lane < n) sc = dg_dot<T, HD>(&sK[lane * KLD], &sQ[g * HD]);
                float mx = fmaxf(mreg[k], warp_max(sc));  // finite: n >= 1
                float corr = exp2f(mreg[k] - mx);          // 0 on the first tile
                float pe = lane < n ? exp2f(sc - mx) : 0.f;
                lreg[k] = lreg[k] * corr + warp_sum(pe);
                mreg[k] = mx;
                sP[lane][g] = pe;
                if (lane == 0) sCorr[g] = corr;
            }
        }
        __syncthreads();
#pragma unroll
        for (int a = 0; a < NA; a++) {
            int g = g0 + a * HG;
            if (G % HG == 0 || g < G) acc[a] *= sCorr[g];
        }
        for (int j = 0; j < n; j++) {
            float v = to_f32(sV[j * HD + d]);
#pragma unroll
            for (int a = 0; a < NA; a++) {
                int g = g0 + a * HG;
                if (G % HG == 0 || g < G) acc[a] += sP[j][g] * v;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < NW; k++) {
        int g = w + 4 * k;
        if (g < G && lane == 0) {
            sM[g] = mreg[k];
            sL[g] = lreg[k];
        }
    }
    __syncthreads();
#pragma unroll
    for (int a = 0; a < NA; a++) {
        int g = g0 + a * HG;
        if (g >= G) continue;
        int h = kvh * G + g;
        if (splits == 1) {
            float L = sL[g];
            dg_store(out, (long long)s * outStride + (long long)h * HD + d, outKind, L > 0.f ? acc[a] / L : 0.f);
        } else {
            long long row = ((long long)s * heads + h) * splits + split;
            po[row * HD + d] = acc[a];
            if (d == 0) {
                float M = sM[g];
                pm[row] = M == -KV_INF ? -KV_INF : M * 0.6931471805599453f;  // back to natural units
                pl[row] = sL[g];
            }
        }
    }
    if (splits == 1) return;
    // The last split block of (kvh, s) merges the partials: every block's writes are made
    // visible before it takes its ticket, and the merge reads through L2, each split's
    // max and sum once into shared memory, then the outputs with independent loads.
    __threadfence();
    __syncthreads();
    if (tid == 0) sLast = atomicAdd(&done[s * kvHeads + kvh], 1) == splits - 1;
    __syncthreads();
    if (!sLast) return;
    __threadfence();
    __shared__ float sE[DG_MAX_SPLITS][G], sPl[DG_MAX_SPLITS][G], sLt[G];
    for (int e = tid; e < splits * G; e += DG_THREADS) {
        int i = e / G, g = e - i * G;
        long long row = ((long long)s * heads + kvh * G + g) * splits + i;
        sE[i][g] = __ldcg(pm + row);
        sPl[i][g] = __ldcg(pl + row);
    }
    __syncthreads();
    if (tid < G) sLt[tid] = dg_merge_weights(&sE[0][tid], &sPl[0][tid], G, splits);  // per head
    __syncthreads();
#pragma unroll
    for (int a = 0; a < NA; a++) {
        int g = g0 + a * HG;
        if (g >= G) continue;
        int h = kvh * G + g;
        long long row0 = ((long long)s * heads + h) * splits;
        float v = dg_merge_out<HD>(po, row0, d, &sE[0][g], G, splits, sLt[g]);
        dg_store(out, (long long)s * outStride + (long long)h * HD + d, outKind, v);
    }
    if (tid == 0) done[s * kvHeads + kvh] = 0;
}
// Instances are named attn_decode_grp<headDim>g<group>_<cache>.
#define ATTN_DECODE_GRP(NAME, T, HD, G)                                                                       \
    extern "C" __global__ void __launch_bounds__(DG_THREADS) NAME(void* out, int os, int ok, const float* q,   \
                                    int qs, const T* kc, const T* vc, const int* bt, int maxBlocks,            \
                                    const int* ctx, float* pm, float* pl, float* po, int* done, int heads,     \
                                    int kvh, int bs, int splitLen, float scale) {                              \
        attn_decode_grp<T, HD, G>(out, os, ok, q, qs, kc, vc, bt, maxBlocks, ctx, pm, pl, po, done, heads, kvh, \
                                  bs, splitLen, scale);                                                        \
    }
ATTN_DECODE_GRP(attn_decode_grp64g1_f32, float, 64, 1)
ATTN_DECODE_GRP(attn_decode_grp64g1_f16, f16, 64, 1)
ATTN_DECODE_GRP(attn_decode_grp64g1_bf16, bf16, 64, 1)
ATTN_DECODE_GRP(attn_decode_grp64g2_f32, float, 64, 2)
ATTN_DECODE_GRP(attn_decode_grp64g2_f16, f16, 64, 2)
ATTN_DECODE_GRP(attn_decode_grp64g2_bf16, bf16, 64, 2)
ATTN_DECODE_GRP(attn_decode_grp64g4_f32, float, 64, 4)
ATTN_DECODE_GRP(attn_decode_grp64g4_f16, f16, 64, 4)
ATTN_DECODE_GRP(attn_decode_grp64g4_bf16, bf16, 64, 4)
ATTN_DECODE_GRP(attn_decode_grp64g8_f32, float, 64, 8)
ATTN_DECODE_GRP(attn_decode_grp64g8_f16, f16, 64, 8)
ATTN_DECODE_GRP(attn_decode_grp64g8_bf16, bf16, 64, 8)
ATTN_DECODE_GRP(attn_decode_grp128g1_f32, float, 128, 1)
ATTN_DECODE_GRP(attn_decode_grp128g1_f16, f16, 128, 1)
ATTN_DECODE_GRP(attn_decode_grp128g1_bf16, bf16, 128, 1)
ATTN_DECODE_GRP(attn_decode_grp128g2_f32, float, 128, 2)
ATTN_DECODE_GRP(attn_decode_grp128g2_f16, f16, 128, 2)
ATTN_DECODE_GRP(attn_decode_grp128g2_bf16, bf16, 128, 2)
ATTN_DECODE_GRP(attn_decode_grp128g4_f32, float, 128, 4)
ATTN_DECODE_GRP(attn_decode_grp128g4_f16, f16, 128, 4)
ATTN_DECODE_GRP(attn_decode_grp128g4_bf16, bf16, 128, 4)
ATTN_DECODE_GRP(attn_decode_grp128g8_f32, float, 128, 8)
ATTN_DECODE_GRP(attn_decode_grp128g8_f16, f16, 128, 8)
ATTN_DECODE_GRP(attn_decode_grp128g8_bf16, bf16, 128, 8)

// ---- Decode attention for a few query tokens per sequence (speculative verification) ----
// attn_verify: the grouped decode kernel (attn_decode_grp) for sequences of q >= 1 query
// tokens each, the last q of the sequence's context (seqStarts and ctxLens as in
// attn_prefill). grid (splits, kvHeads * chunks, seqs), block 128: each block serves the G =
// heads/kvHeads query heads of one kv head for QB = NR/G consecutive queries of one
// sequence (chunk c: queries c*QB ..), as NR rows r = jj*G + g (query c*QB + jj, head g;
// rows past the sequence's queries idle). Query jj attends to the context up to its own
// index, so each row is masked causally where its context ends. Every row's arithmetic is
// the grouped decode kernel's for that query alone at its context: the same split-K
// partition (the caller gives the same splitLen), the same tiles, scores, online softmax
// and merge in split order; positions past a row's context add exact zeros. So a query's
// output is the decode kernel's bit for bit, given the same splits. Partial results of a
// query go to pm, pl, po at row ((t * heads + h) * splits + split), t its token index; the
// last block of a (kv head, chunk, sequence) to finish (counted in done[(s * kvHeads + kvh)
// * chunks + c], reset by it) merges them. NR is 4 to 32 rows (16 at most for f32 caches:
// shared memory).
template <typename T, int HD, int NR>
__device__ void attn_verify(void* out, int outStride, int outKind, const float* q, int qStride, const T* kc,
                            const T* vc, const int* blockTables, int maxBlocks, const int* seqStarts,
                            const int* ctxLens, float* pm, float* pl, float* po, int* done, int heads, int kvHeads,
                            int blockSize, int splitLen, float scale, int chunks) {
    constexpr int E = 16 / sizeof(T);      // elements per 16-byte vector
    constexpr int KLD = HD + E;            // K row stride (padding: lanes on distinct banks)
    constexpr int HG = DG_THREADS / HD;    // row groups of the PV phase (1 or 2)
    constexpr int NA = NR / HG;            // accumulators per thread: rows hg*NA .. hg*NA+NA-1
    constexpr int NW = NR / 4;             // rows per warp in the score phase: w, w+4, ...
    constexpr int MS = 2 * DG_MAX_SPLITS * NR;           // the merge's weights and sums
    constexpr int QF = NR * HD > MS ? NR * HD : MS;      // sQ, reused by the merge
    __shared__ __align__(16) float sQ[QF];
    __shared__ __align__(16) T sK[DG_TP * KLD];
    __shared__ __align__(16) T sV[DG_TP * HD];
    __shared__ __align__(16) float sP[NR][DG_TP];
    __shared__ float sCorr[NR], sM[NR], sL[NR];
    __shared__ int sLast;
    pdl_entry();
    int split = blockIdx.x, kvh = blockIdx.y / chunks, chunk = blockIdx.y - kvh * chunks, s = blockIdx.z;
    int splits = gridDim.x;
    int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    int G = heads / kvHeads, QB = NR / G;
    int t0 = seqStarts[s], qlen = seqStarts[s + 1] - t0;
    int j0 = chunk * QB;
    if (j0 >= qlen) return;  // every split of this chunk returns: no ticket is taken
    int nq = min(QB, qlen - j0), rows = nq * G;
    int c0 = ctxLens[s] - qlen + j0;  // the context index of the block's first query
    int start = split * splitLen, end = min(c0 + nq, start + splitLen);
    const float qscale = scale * 1.4426950408889634f;  // scores in base 2
    for (int i = tid; i < NR * HD; i += DG_THREADS) {
        int r = i / HD, dd = i - r * HD;
        float v = 0.f;
        if (r < rows) {
            int jj = r / G, g = r - jj * G;
            v = q[(long long)(t0 + j0 + jj) * qStride + (long long)(kvh * G + g) * HD + dd] * qscale;
        }
        sQ[i] = v;
    }
    float mreg[NW], lreg[NW];
#pragma unroll
    for (int k = 0; k < NW; k++) {
        mreg[k] = -KV_INF;
        lreg[k] = 0.f;
    }
    int d = tid % HD, hg = HG == 1 ? 0 : tid / HD;
    float acc[NA];
#pragma unroll
    for (int a = 0; a < NA; a++) acc[a] = 0.f;
    const int* bt = blockTables + (long long)s * maxBlocks;

    for (int k0 = start; k0 < end; k0 += DG_TP) {
        int n = min(DG_TP, end - k0);
        __syncthreads();  // the previous tile is consumed (and sQ written)
        dg_load_tile<T, HD, KLD>(sK, sV, kc, vc, bt, k0, n, blockSize, kvHeads, kvh);
        __syncthreads();
        // Scores and the online softmax: lane j of warp w takes position k0 + j for rows w,
        // w+4, ..., each over its own positions of the tile (lanes below nr); a row with
        // none yet (its context ends before the tile) keeps -inf and 0.
#pragma unroll
        for (int k = 0; k < NW; k++) {
            int r = w + 4 * k;
            int nr = r < rows ? min(n, c0 + r / G + 1 - k0) : 0;
            float sc = -KV_INF;
            if (lane < nr) sc = dg_dot<T, HD>(&sK[lane * KLD], &sQ[r * HD]);
            float mx = fmaxf(mreg[k], warp_max(sc));
            float corr = 1.f, pe = 0.f;
            if (mx != -KV_INF) {
                corr = exp2f(mreg[k] - mx);  // 0 on the row's first tile
                pe = lane < nr ? exp2f(sc - mx) : 0.f;
            }
            lreg[k] = lreg[k] * corr + warp_sum(pe);
            mreg[k] = mx;
            sP[r][lane] = pe;
            if (lane == 0) sCorr[r] = corr;
        }
        __syncthreads();
#pragma unroll
        for (int a = 0; a < NA; a++)
            if (hg * NA + a < rows) acc[a] *= sCorr[hg * NA + a];
        for (int j = 0; j < n; j += 4) {  // rows past n hold zeros, as do their probabilities
            float v0 = to_f32(sV[j * HD + d]), v1 = to_f32(sV[(j + 1) * HD + d]);
            float v2 = to_f32(sV[(j + 2) * HD + d]), v3 = to_f32(sV[(j + 3) * HD + d]);
#pragma unroll
            for (int a = 0; a < NA; a++) {
                if (hg * NA + a < rows) {
                    float4 p = *(const float4*)&sP[hg * NA + a][j];
                    acc[a] += p.x * v0;
                    acc[a] += p.y * v1;
                    acc[a] += p.z * v2;
                    acc[a] += p.w * v3;
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < NW; k++) {
        int r = w + 4 * k;
        if (lane == 0) {
            sM[r] = mreg[k];
            sL[r] = lreg[k];
        }
    }
    __syncthreads();
#pragma unroll
    for (int a = 0; a < NA; a++) {
        int r = hg * NA + a;
        if (r >= rows) continue;
        int jj = r / G, h = kvh * G + (r - jj * G);
        long long t = t0 + j0 + jj;
        if (splits == 1) {
            float L = sL[r];
            dg_store(out, t * outStride + (long long)h * HD + d, outKind, L > 0.f ? acc[a] / L : 0.f);
        } else {
            long long row = (t * heads + h) * splits + split;
            po[row * HD + d] = acc[a];
            if (d == 0) {
                float M = sM[r];
                pm[row] = M == -KV_INF ? -KV_INF : M * 0.6931471805599453f;  // back to natural units
                pl[row] = sL[r];
            }
        }
    }
    if (splits == 1) return;
    // The last split block of (kvh, chunk, s) merges the partials, as attn_decode_grp does.
    int ticket = (s * kvHeads + kvh) * chunks + chunk;
    __threadfence();
    __syncthreads();
    if (tid == 0) sLast = atomicAdd(&done[ticket], 1) == splits - 1;
    __syncthreads();
    if (!sLast) return;
    __threadfence();
    float* sE = sQ;                          // [split][row]: exp(m_i - M), then the weights
    float* sPl = sQ + DG_MAX_SPLITS * NR;    // [split][row]: the splits' sums
    for (int e = tid; e < splits * rows; e += DG_THREADS) {
        int i = e / rows, r = e - i * rows;
        int jj = r / G, h = kvh * G + (r - jj * G);
        long long row = ((long long)(t0 + j0 + jj) * heads + h) * splits + i;
        sE[i * NR + r] = __ldcg(pm + row);
        sPl[i * NR + r] = __ldcg(pl + row);
    }
    __syncthreads();
    if (tid < rows) sL[tid] = dg_merge_weights(sE + tid, sPl + tid, NR, splits);  // per row
    __syncthreads();
#pragma unroll
    for (int a = 0; a < NA; a++) {
        int r = hg * NA + a;
        if (r >= rows) continue;
        int jj = r / G, h = kvh * G + (r - jj * G);
        long long t = t0 + j0 + jj;
        float v = dg_merge_out<HD>(po, (t * heads + h) * splits, d, sE + r, NR, splits, sL[r]);
        dg_store(out, t * outStride + (long long)h * HD + d, outKind, v);
    }
    if (tid == 0) done[ticket] = 0;
}
// Instances are named attn_verify<headDim>r<NR>_<cache>: NR rows 4, 16 and 32 (16 at most for
// f32 caches); the launch picks the fewest rows that hold a kv head's query heads while the
// grid fits the device, more once it does not (verifyBlockRows).
#define ATTN_VERIFY(NAME, T, HD, NR)                                                                          \
    extern "C" __global__ void __launch_bounds__(DG_THREADS) NAME(void* out, int os, int ok, const float* q,   \
                                    int qs, const T* kc, const T* vc, const int* bt, int maxBlocks,            \
                                    const int* starts, const int* ctx, float* pm, float* pl, float* po,        \
                                    int* done, int heads, int kvh, int bs, int splitLen, float scale,          \
                                    int chunks) {                                                              \
        attn_verify<T, HD, NR>(out, os, ok, q, qs, kc, vc, bt, maxBlocks, starts, ctx, pm, pl, po, done, heads, \
                               kvh, bs, splitLen, scale, chunks);                                              \
    }
ATTN_VERIFY(attn_verify64r4_f32, float, 64, 4)
ATTN_VERIFY(attn_verify64r16_f32, float, 64, 16)
ATTN_VERIFY(attn_verify64r4_f16, f16, 64, 4)
ATTN_VERIFY(attn_verify64r16_f16, f16, 64, 16)
ATTN_VERIFY(attn_verify64r32_f16, f16, 64, 32)
ATTN_VERIFY(attn_verify64r4_bf16, bf16, 64, 4)
ATTN_VERIFY(attn_verify64r16_bf16, bf16, 64, 16)
ATTN_VERIFY(attn_verify64r32_bf16, bf16, 64, 32)
ATTN_VERIFY(attn_verify128r4_f32, float, 128, 4)
ATTN_VERIFY(attn_verify128r16_f32, float, 128, 16)
ATTN_VERIFY(attn_verify128r4_f16, f16, 128, 4)
ATTN_VERIFY(attn_verify128r16_f16, f16, 128, 16)
ATTN_VERIFY(attn_verify128r32_f16, f16, 128, 32)
ATTN_VERIFY(attn_verify128r4_bf16, bf16, 128, 4)
ATTN_VERIFY(attn_verify128r16_bf16, bf16, 128, 16)
ATTN_VERIFY(attn_verify128r32_bf16, bf16, 128, 32)

// attn_combine: grid (heads, seqs), block 128: out[s][h*headDim + d] = the softmax-weighted
// merge of the splits' partial results. A sequence with no context gets zeros.
template <typename T>
__device__ void attn_combine(T* out, int outStride, const float* pm, const float* pl, const float* po,
                             int splits, int heads, int headDim) {
    pdl_entry();
    int h = blockIdx.x, s = blockIdx.y;
    long long row0 = ((long long)s * heads + h) * splits;
    float M = -KV_INF;
    for (int i = 0; i < splits; i++) M = fmaxf(M, pm[row0 + i]);
    float L = 0.f;
    if (M != -KV_INF)
        for (int i = 0; i < splits; i++)
            if (pm[row0 + i] != -KV_INF) L += pl[row0 + i] * expf(pm[row0 + i] - M);
    T* o = out + (long long)s * outStride + h * headDim;
    for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
        float v = 0.f;
        if (L > 0.f) {
            for (int i = 0; i < splits; i++)
                if (pm[row0 + i] != -KV_INF) v += po[(row0 + i) * headDim + d] * expf(pm[row0 + i] - M);
            v /= L;
        }
        o[d] = from_f32<T>(v);
    }
}
extern "C" __global__ void attn_combine_f32(float* o, int os, const float* pm, const float* pl, const float* po, int sp, int heads, int hd) { attn_combine(o, os, pm, pl, po, sp, heads, hd); }
extern "C" __global__ void attn_combine_f16(f16* o, int os, const float* pm, const float* pl, const float* po, int sp, int heads, int hd) { attn_combine(o, os, pm, pl, po, sp, heads, hd); }
extern "C" __global__ void attn_combine_bf16(bf16* o, int os, const float* pm, const float* pl, const float* po, int sp, int heads, int hd) { attn_combine(o, os, pm, pl, po, sp, heads, hd); }

#define PF_TQ 16  // query tokens per block (4 warps x 4)
#define PF_QW 4   // query tokens per warp
#define PF_KT 16  // keys per shared-memory tile

// attn_prefill: grid (ceil(maxQueryLen/16), heads, seqs), block 128. Sequence s owns query
// tokens [seqStarts[s], seqStarts[s+1]) of q (row t at t*qStride) and out (row t at
// t*outStride); its i-th token of qlen, at index ctxLens[s]-qlen+i of its context, attends
// causally to the context's cache positions [0, that index], which must already hold
// their keys and values (the token's RoPE position plays no part). K/V are read tile by
// tile into shared memory and shared by the block's 16 queries, with an online softmax.
// With window > 0 a token at context index i sees only the positions i-window+1..i
// (sliding-window attention); with softcap > 0 each scaled score s becomes
// softcap * tanh(s / softcap) (Gemma 2). attn_window_* are those instances.
template <typename T, typename O>
__device__ void attn_prefill(O* out, int outStride, const float* q, int qStride, const T* kc, const T* vc,
                             const int* blockTables, int maxBlocks, const int* seqStarts, const int* ctxLens,
                             int heads, int kvHeads, int headDim, int blockSize, float scale, int window = 0,
                             float softcap = 0.f) {
    __shared__ float ks[PF_KT][256], vs[PF_KT][256];
    int tile = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    int q0 = seqStarts[s], qlen = seqStarts[s + 1] - q0;
    if (tile * PF_TQ >= qlen) return;
    int c0 = ctxLens[s] - qlen;  // the context index of the sequence's first query token
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int nc = headDim >> 5;
    int kvh = h / (heads / kvHeads);
    const int* bt = blockTables + (long long)s * maxBlocks;

    int kmax = -1;  // the tile's last key position
    for (int j = 0; j < PF_TQ; j++) {
        int t = tile * PF_TQ + j;
        if (t < qlen) kmax = max(kmax, c0 + t);
    }
    float qr[PF_QW][ATT_MAXC], acc[PF_QW][ATT_MAXC], m[PF_QW], l[PF_QW];
    int qpos[PF_QW];
#pragma unroll
    for (int i = 0; i < PF_QW; i++) {
        int t = tile * PF_TQ + w * PF_QW + i;
        qpos[i] = t < qlen ? c0 + t : -1;
        const float* qp = q + (long long)(q0 + (t < qlen ? t : 0)) * qStride + h * headDim;
#pragma unroll
        for (int c = 0; c < ATT_MAXC; c++) {
            qr[i][c] = (qpos[i] >= 0 && c < nc) ? qp[lane + 32 * c] * scale : 0.f;
            acc[i][c] = 0.f;
        }
        m[i] = -KV_INF;
        l[i] = 0.f;
    }
    int kmin = window > 0 ? max(0, c0 + tile * PF_TQ - window + 1) : 0;  // the tile's first key seen
    for (int k0 = kmin / PF_KT * PF_KT; k0 <= kmax; k0 += PF_KT) {
        __syncthreads();
        for (int e = threadIdx.x; e < PF_KT * headDim; e += blockDim.x) {
            int j = e / headDim, d = e - j * headDim;
            int p = k0 + j;
            float kv = 0.f, vv = 0.f;
            if (p <= kmax) {
                long long slot = (long long)bt[p / blockSize] * blockSize + p % blockSize;
                long long idx = (slot * kvHeads + kvh) * headDim + d;
                kv = to_f32(kc[idx]);
                vv = to_f32(vc[idx]);
            }
            ks[j][d] = kv;
            vs[j][d] = vv;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < PF_QW; i++) {
            int last = min(PF_KT - 1, qpos[i] - k0);  // warp-uniform
            int first = window > 0 ? max(0, qpos[i] - window + 1 - k0) : 0;
            for (int j = first; j <= last; j++) {
                float d = 0.f;
#pragma unroll
                for (int c = 0; c < ATT_MAXC; c++)
                    if (c < nc) d += qr[i][c] * ks[j][lane + 32 * c];
                d = warp_sum(d);
                if (softcap > 0.f) d = softcap * tanhf(d / softcap);
                float mn = fmaxf(m[i], d);
                float corr = expf(m[i] - mn), e = expf(d - mn);
                l[i] = l[i] * corr + e;
#pragma unroll
                for (int c = 0; c < ATT_MAXC; c++)
                    if (c < nc) acc[i][c] = acc[i][c] * corr + e * vs[j][lane + 32 * c];
                m[i] = mn;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < PF_QW; i++) {
        if (qpos[i] < 0) continue;
        int t = tile * PF_TQ + w * PF_QW + i;
        O* o = out + (long long)(q0 + t) * outStride + h * headDim;
        float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
        for (int c = 0; c < nc; c++) o[lane + 32 * c] = from_f32<O>(acc[i][c] * inv);
    }
}
// Instances are named attn_prefill_<cache>_<out>.
#define ATTN_PREFILL(NAME, T, O)                                                                          \
    extern "C" __global__ void NAME(O* out, int os, const float* q, int qs, const T* kc, const T* vc,      \
                                    const int* bt, int maxBlocks, const int* starts, const int* ctxLens,   \
                                    int heads, int kvh, int hd, int bs, float scale) {                     \
        attn_prefill<T, O>(out, os, q, qs, kc, vc, bt, maxBlocks, starts, ctxLens, heads, kvh, hd, bs, scale); \
    }
ATTN_PREFILL(attn_prefill_f32_f32, float, float)
ATTN_PREFILL(attn_prefill_f32_f16, float, f16)
ATTN_PREFILL(attn_prefill_f32_bf16, float, bf16)
ATTN_PREFILL(attn_prefill_f16_f32, f16, float)
ATTN_PREFILL(attn_prefill_f16_f16, f16, f16)
ATTN_PREFILL(attn_prefill_f16_bf16, f16, bf16)
ATTN_PREFILL(attn_prefill_bf16_f32, bf16, float)
ATTN_PREFILL(attn_prefill_bf16_f16, bf16, f16)
ATTN_PREFILL(attn_prefill_bf16_bf16, bf16, bf16)
// attn_window_<cache>: attn_prefill with a window and soft-capping, F32 output.
#define ATTN_WINDOW(NAME, T)                                                                              \
    extern "C" __global__ void NAME(float* out, int os, const float* q, int qs, const T* kc, const T* vc,  \
                                    const int* bt, int maxBlocks, const int* starts, const int* ctxLens,   \
                                    int heads, int kvh, int hd, int bs, float scale, int window,           \
                                    float softcap) {                                                       \
        attn_prefill<T, float>(out, os, q, qs, kc, vc, bt, maxBlocks, starts, ctxLens, heads, kvh, hd, bs, \
                               scale, window, softcap);                                                    \
    }
ATTN_WINDOW(attn_window_f32, float)
ATTN_WINDOW(attn_window_f16, f16)
ATTN_WINDOW(attn_window_bf16, bf16)

// ---- Tensor-core prefill (bf16 cache, head sizes 64 and 128) ----
// attn_prefill_tc: FlashAttention-2 over the paged cache with mma.sync m16n8k16 (bf16
// operands, f32 accumulation). grid (ceil(maxQueryLen/64), heads, seqs), block 128: each
// warp owns 16 query rows of the block's 64. The Q tile (F32, scaled by scale*log2(e)) is
// rounded to bf16 once into shared memory and kept in registers as A fragments; K and V
// tiles of 64 positions come through the block table into shared memory; scores, the
// online softmax (base 2) and the output accumulator stay in registers. Tiles run from
// the last (the most keys) to the first so the long blocks start first.

#define TC_BQ 64  // query rows per block
#define TC_BK 64  // key positions per shared-memory tile

__device__ __forceinline__ unsigned int tc_pack_bf16(float lo, float hi) {
    unsigned int r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ void tc_mma(float* c, unsigned int a0, unsigned int a1, unsigned int a2, unsigned int a3,
                                       unsigned int b0, unsigned int b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned int tc_smem_addr(const void* p) {
    unsigned int r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

// TcBF16 loads a tile's 8 keys and values at element idx of a BF16 cache as they are.
struct TcBF16 {
    const bf16 *kc, *vc;
    __device__ __forceinline__ void load(long long idx, uint4& k, uint4& v) const {
        k = *(const uint4*)(kc + idx);
        v = *(const uint4*)(vc + idx);
    }
};

// TcKVQ loads 8 keys and values at element idx of a quantized cache of code type C
// (kvq.cuh; groups of 32, so the 8 share a scale), dequantized and rounded to BF16.
template <int C>
struct TcKVQ {
    const unsigned char *kc, *vc;
    const float *ks, *vs;
    __device__ __forceinline__ static uint4 bf16x8(uint2 w, float s) {
        uint4 r;
        r.x = tc_pack_bf16(kvq_byte<C>(w.x, 0) * s, kvq_byte<C>(w.x, 1) * s);
        r.y = tc_pack_bf16(kvq_byte<C>(w.x, 2) * s, kvq_byte<C>(w.x, 3) * s);
        r.z = tc_pack_bf16(kvq_byte<C>(w.y, 0) * s, kvq_byte<C>(w.y, 1) * s);
        r.w = tc_pack_bf16(kvq_byte<C>(w.y, 2) * s, kvq_byte<C>(w.y, 3) * s);
        return r;
    }
    __device__ __forceinline__ void load(long long idx, uint4& k, uint4& v) const {
        k = bf16x8(*(const uint2*)(kc + idx), ks[idx / 32]);
        v = bf16x8(*(const uint2*)(vc + idx), vs[idx / 32]);
    }
};

// attn_prefill_tc reads its K and V tiles through the loader L (TcBF16 or TcKVQ).
template <int HD, typename O, typename L>
__device__ void attn_prefill_tc(O* out, int outStride, const float* q, int qStride, L cache,
                                const int* blockTables, int maxBlocks, const int* seqStarts, const int* ctxLens,
                                int heads, int kvHeads, int blockSize, float scale) {
    const int LD = HD + 8;  // padded row (bf16 elements): conflict-free fragment loads
    const int NK = HD / 16; // k-steps over the head dim
    const int ND = HD / 8;  // n-tiles over the head dim
    __shared__ __align__(16) unsigned short sKQ[TC_BK * LD];  // the Q tile first, then K tiles
    __shared__ __align__(16) unsigned short sV[TC_BK * LD];
    __shared__ int sRowPos[TC_BQ];
    __shared__ int sKmax;
    int tile = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    int q0 = seqStarts[s], qlen = seqStarts[s + 1] - q0;
    if (tile * TC_BQ >= qlen) return;
    int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    int kvh = h / (heads / kvHeads);
    const int* bt = blockTables + (long long)s * maxBlocks;
    const float qscale = scale * 1.4426950408889634f;

    if (tid == 0) sKmax = -1;
    __syncthreads();
    if (tid < TC_BQ) {
        int t = tile * TC_BQ + tid;
        int p = t < qlen ? ctxLens[s] - qlen + t : -1;
        sRowPos[tid] = p;
        atomicMax(&sKmax, p);
    }
    // Q tile -> bf16 pairs in shared memory (zeros past the chunk).
    for (int e = tid; e < TC_BQ * HD / 2; e += blockDim.x) {
        int r = e / (HD / 2), c = (e - r * (HD / 2)) * 2;
        int t = tile * TC_BQ + r;
        float x0 = 0.f, x1 = 0.f;
        if (t < qlen) {
            const float* qp = q + (long long)(q0 + t) * qStride + h * HD + c;
            x0 = qp[0] * qscale;
            x1 = qp[1] * qscale;
        }
        *(unsigned int*)&sKQ[r * LD + c] = tc_pack_bf16(x0, x1);
    }
    __syncthreads();
    int g = lane >> 2, tq = lane & 3;  // fragment row group and thread-in-quad
    int rw = w * 16;                   // the warp's first row
    unsigned int qa[NK][4];
#pragma unroll
    for (int k = 0; k < NK; k++) {
        int c = k * 16 + tq * 2;
        qa[k][0] = *(const unsigned int*)&sKQ[(rw + g) * LD + c];
        qa[k][1] = *(const unsigned int*)&sKQ[(rw + g + 8) * LD + c];
        qa[k][2] = *(const unsigned int*)&sKQ[(rw + g) * LD + c + 8];
        qa[k][3] = *(const unsigned int*)&sKQ[(rw + g + 8) * LD + c + 8];
    }
    int pos0 = sRowPos[rw + g], pos1 = sRowPos[rw + g + 8];
    int wmax = -1;  // the warp's last key position
    for (int i = 0; i < 16; i++) wmax = max(wmax, sRowPos[rw + i]);
    int kmax = sKmax;
    float oacc[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.f;
    float m0 = -KV_INF, m1 = -KV_INF, l0 = 0.f, l1 = 0.f;

    for (int k0 = 0; k0 <= kmax; k0 += TC_BK) {
        __syncthreads();  // the previous tile (or the Q tile) is consumed
        for (int e = tid; e < TC_BK * (HD / 8); e += blockDim.x) {
            int j = e / (HD / 8), c = (e - j * (HD / 8)) * 8;
            int p = k0 + j;
            uint4 kv = {0u, 0u, 0u, 0u}, vv = {0u, 0u, 0u, 0u};
            if (p <= kmax) {
                long long slot = (long long)bt[p / blockSize] * blockSize + p % blockSize;
                cache.load((slot * kvHeads + kvh) * HD + c, kv, vv);
            }
            *(uint4*)&sKQ[j * LD + c] = kv;
            *(uint4*)&sV[j * LD + c] = vv;
        }
        __syncthreads();
        if (k0 > wmax) continue;  // every row of this warp is past its causal limit

        // S = Q K^T for the warp's 16 rows x 64 keys.
        float sc[TC_BK / 8][4];
#pragma unroll
        for (int n = 0; n < TC_BK / 8; n++) {
            sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
            const unsigned short* kr = &sKQ[(n * 8 + g) * LD + tq * 2];
#pragma unroll
            for (int k = 0; k < NK; k++) {
                unsigned int b0 = *(const unsigned int*)(kr + k * 16);
                unsigned int b1 = *(const unsigned int*)(kr + k * 16 + 8);
                tc_mma(sc[n], qa[k][0], qa[k][1], qa[k][2], qa[k][3], b0, b1);
            }
        }
        // Causal mask and the online softmax (rows g and g+8 of the warp).
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int n = 0; n < TC_BK / 8; n++) {
            int p = k0 + n * 8 + tq * 2;
            if (p > pos0) sc[n][0] = -KV_INF;
            if (p + 1 > pos0) sc[n][1] = -KV_INF;
            if (p > pos1) sc[n][2] = -KV_INF;
            if (p + 1 > pos1) sc[n][3] = -KV_INF;
            mx0 = fmaxf(mx0, fmaxf(sc[n][0], sc[n][1]));
            mx1 = fmaxf(mx1, fmaxf(sc[n][2], sc[n][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        float b0s = mx0 == -KV_INF ? 0.f : mx0, b1s = mx1 == -KV_INF ? 0.f : mx1;
        float c0 = exp2f(m0 - b0s), c1 = exp2f(m1 - b1s);  // exp2(-inf) = 0 on the first tile
        m0 = mx0;
        m1 = mx1;
        float s0 = 0.f, s1 = 0.f;
        unsigned int pa[TC_BK / 16][4];
#pragma unroll
        for (int n = 0; n < TC_BK / 8; n++) {
            float e0 = exp2f(sc[n][0] - b0s), e1 = exp2f(sc[n][1] - b0s);
            float e2 = exp2f(sc[n][2] - b1s), e3 = exp2f(sc[n][3] - b1s);
            s0 += e0 + e1;
            s1 += e2 + e3;
            // Two 8-key n-tiles of S make one 16-key A fragment of P.
            pa[n / 2][(n & 1) * 2 + 0] = tc_pack_bf16(e0, e1);
            pa[n / 2][(n & 1) * 2 + 1] = tc_pack_bf16(e2, e3);
        }
        l0 = l0 * c0 + s0;
        l1 = l1 * c1 + s1;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            oacc[n][0] *= c0;
            oacc[n][1] *= c0;
            oacc[n][2] *= c1;
            oacc[n][3] *= c1;
        }
        // O += P V: V fragments through ldmatrix.trans, two head-dim n-tiles per load.
        unsigned int vbase = tc_smem_addr(&sV[(lane & 15) * LD + (lane >> 4) * 8]);
#pragma unroll
        for (int k = 0; k < TC_BK / 16; k++) {
#pragma unroll
            for (int n = 0; n < ND; n += 2) {
                unsigned int v0, v1, v2, v3;
                unsigned int addr = vbase + (unsigned int)((k * 16 * LD + n * 8) * 2);
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                             : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3)
                             : "r"(addr));
                tc_mma(oacc[n], pa[k][0], pa[k][1], pa[k][2], pa[k][3], v0, v1);
                tc_mma(oacc[n + 1], pa[k][0], pa[k][1], pa[k][2], pa[k][3], v2, v3);
            }
        }
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    int t0 = tile * TC_BQ + rw + g, t1 = t0 + 8;
#pragma unroll
    for (int n = 0; n < ND; n++) {
        int c = n * 8 + tq * 2;
        if (t0 < qlen) {
            O* o = out + (long long)(q0 + t0) * outStride + h * HD + c;
            o[0] = from_f32<O>(oacc[n][0] * inv0);
            o[1] = from_f32<O>(oacc[n][1] * inv0);
        }
        if (t1 < qlen) {
            O* o = out + (long long)(q0 + t1) * outStride + h * HD + c;
            o[0] = from_f32<O>(oacc[n][2] * inv1);
            o[1] = from_f32<O>(oacc[n][3] * inv1);
        }
    }
}
// Instances are named attn_prefill_tc<headDim>_bf16_<out>.
#define ATTN_PREFILL_TC(NAME, HD, O)                                                                        \
    extern "C" __global__ void __launch_bounds__(128) NAME(O* out, int os, const float* q, int qs,          \
                                    const bf16* kc, const bf16* vc, const int* bt, int maxBlocks,            \
                                    const int* starts, const int* ctxLens, int heads, int kvh, int bs,       \
                                    float scale) {                                                           \
        attn_prefill_tc<HD, O>(out, os, q, qs, TcBF16{kc, vc}, bt, maxBlocks, starts, ctxLens, heads, kvh, bs,  \
                               scale);                                                                       \
    }
ATTN_PREFILL_TC(attn_prefill_tc64_bf16_f32, 64, float)
ATTN_PREFILL_TC(attn_prefill_tc64_bf16_f16, 64, f16)
ATTN_PREFILL_TC(attn_prefill_tc64_bf16_bf16, 64, bf16)
ATTN_PREFILL_TC(attn_prefill_tc128_bf16_f32, 128, float)
ATTN_PREFILL_TC(attn_prefill_tc128_bf16_f16, 128, f16)
ATTN_PREFILL_TC(attn_prefill_tc128_bf16_bf16, 128, bf16)
// Instances over a quantized cache (tiles dequantized and rounded to BF16 as they are
// loaded) are named attn_prefill_tc<headDim>_<code>_f32.
#define ATTN_PREFILL_TCQ(NAME, HD, C)                                                                        \
    extern "C" __global__ void __launch_bounds__(128) NAME(float* out, int os, const float* q, int qs,        \
                                    const unsigned char* kc, const unsigned char* vc, const float* ks,        \
                                    const float* vs, const int* bt, int maxBlocks, const int* starts,         \
                                    const int* ctxLens, int heads, int kvh, int bs, float scale) {            \
        attn_prefill_tc<HD, float>(out, os, q, qs, TcKVQ<C>{kc, vc, ks, vs}, bt, maxBlocks, starts, ctxLens,  \
                                   heads, kvh, bs, scale);                                                    \
    }
ATTN_PREFILL_TCQ(attn_prefill_tc64_i8_f32, 64, KVQ_I8)
ATTN_PREFILL_TCQ(attn_prefill_tc64_e4m3_f32, 64, KVQ_E4M3)
ATTN_PREFILL_TCQ(attn_prefill_tc64_e5m2_f32, 64, KVQ_E5M2)
ATTN_PREFILL_TCQ(attn_prefill_tc128_i8_f32, 128, KVQ_I8)
ATTN_PREFILL_TCQ(attn_prefill_tc128_e4m3_f32, 128, KVQ_E4M3)
ATTN_PREFILL_TCQ(attn_prefill_tc128_e5m2_f32, 128, KVQ_E5M2)
