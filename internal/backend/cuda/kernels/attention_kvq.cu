// The quantized KV cache (package kvquant's layout, the same bytes as the CPU backend's):
// one code byte per element in kc / vc, laid out as a 16-bit cache's elements
// ([slot][kvHeads][headDim]), and one float32 scale per group of `group` consecutive
// elements of a head vector in ks / vs ([slot][kvHeads][headDim / group]), so element i
// reads as value(kc[i]) * ks[i / group]. A group's scale is max|x| / the code type's
// largest value, chosen as the token is written (rope_kvq); a group of zeros (or one with a
// NaN or an infinity) has scale 0 and zero codes. Code types (template parameter C, and
// their decoding: kvq.cuh): KVQ_I8 (a signed byte), KVQ_E4M3 (FP8 E4M3 "fn", largest 448),
// KVQ_E5M2 (FP8 E5M2, largest 57344). Attention reads the codes and dequantizes them in
// registers: the grouped decode kernel (attn_decode_grpq, decode of one query per
// sequence), the tensor-core prefill of attention.cu for long chunks (attn_prefill_tc*,
// tiles rounded to BF16 as the BF16 cache's are), and a varlen kernel for everything else
// (attn_prefillq: short chunks, verification, windows, soft-capping, head sizes the other
// kernels lack).

// kvq_code returns the code of y = x / scale (|y| at most the type's largest value, up to
// rounding), as package kvquant writes it: int8 rounded to nearest even and clamped to
// ±127; FP8 to the nearest code, ties to the even mantissa, beyond the largest finite
// value saturated to it, subnormals below the smallest normal exponent.
template <int C>
__device__ __forceinline__ unsigned kvq_code(float y) {
    if (C == KVQ_I8) {
        int r = __float2int_rn(y);
        r = max(-127, min(127, r));
        return (unsigned)r & 0xffu;
    }
    const int M = C == KVQ_E4M3 ? 3 : 2;                 // mantissa bits
    const int B = C == KVQ_E4M3 ? 7 : 15;                // exponent bias
    const float MAXV = C == KVQ_E4M3 ? 448.f : 57344.f;  // largest finite value
    const unsigned MAXC = C == KVQ_E4M3 ? 0x7eu : 0x7bu; // its code
    unsigned sign = (__float_as_uint(y) >> 24) & 0x80u;
    float x = fabsf(y);
    if (x != x) return sign | 0x7fu;
    if (x >= MAXV) return sign | MAXC;
    int e = max(1 - B, (int)((__float_as_uint(x) >> 23) & 0xffu) - 127);  // x = 1.f x 2^e, or subnormal
    int m = __float2int_rn(x * __int_as_float((127 + M - e) << 23));        // exact power-of-two scaling
    if (m >= (1 << (M + 1))) {  // rounded up into the next binade
        e++;
        m >>= 1;
    }
    if (m < (1 << M)) return sign | (unsigned)m;  // subnormal (or zero)
    unsigned code = (unsigned)((e + B) << M) | (unsigned)(m - (1 << M));
    return sign | min(code, MAXC);
}

// kvq_qmax is the largest value of code type C: a group's scale is its max|x| over it.
template <int C>
__device__ __forceinline__ float kvq_qmax() {
    return C == KVQ_I8 ? 127.f : (C == KVQ_E4M3 ? 448.f : 57344.f);
}

// kvq_store_row quantizes one head vector x (headDim floats in shared memory) into codes
// (headDim bytes) and scales (headDim / group floats), a warp a group at a time.
template <int C>
__device__ void kvq_store_row(const float* x, unsigned char* codes, float* scales, int headDim, int group) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int g = w; g < headDim / group; g += nw) {
        const float* xs = x + g * group;
        float amax = 0.f;
        float bad = 0.f;  // 1 where the group holds a NaN or an infinity
        for (int i = lane; i < group; i += 32) {
            float a = fabsf(xs[i]);
            if (!(a <= 3.402823466e38f)) bad = 1.f;
            amax = fmaxf(amax, a);
        }
        amax = warp_max(amax);
        bad = warp_max(bad);
        float s = amax / kvq_qmax<C>();
        if (bad != 0.f || s == 0.f || !(s <= 3.402823466e38f)) s = 0.f;
        for (int i = lane; i < group; i += 32) codes[g * group + i] = s == 0.f ? 0 : (unsigned char)kvq_code<C>(xs[i] / s);
        if (lane == 0) scales[g] = s;
    }
}

// rope_kvq: rope_kv (rope.cu) into a quantized cache. For token t (grid.x) block y (grid.y
// = heads + kvHeads) rotates query head y in place, or, y = heads + h, rotates key head h
// and quantizes it and value head h into cache slot slots[t] (skipped when < 0; the value
// skipped when vc is kc, a cache whose values are its keys). The
// rotation is rope_kv's, term for term. Block of 64 threads.
template <int C>
__device__ void rope_kvq(float* q, const float* k, const float* v, int qStride, int kStride, int vStride,
                         unsigned char* kc, unsigned char* vc, float* ks, float* vs, const int* slots, const int* pos,
                         const float* invFreq, float mscale, int heads, int kvHeads, int headDim, int ropeDim, int neox,
                         int group) {
    pdl_entry();
    __shared__ float sk[256], sv[256];
    long long t = blockIdx.x;
    int hy = blockIdx.y;
    int half = ropeDim / 2;
    float fpos = (float)pos[t];
    long long slot = slots[t];
    bool isQ = hy < heads;
    int h = isQ ? hy : hy - heads;
    if (!isQ && slot < 0) return;
    const float* src = isQ ? q + t * qStride + (long long)h * headDim : k + t * kStride + (long long)h * headDim;
    float* qd = q + t * qStride + (long long)h * headDim;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf(fpos * invFreq[i], &s, &c);
        s *= mscale;
        c *= mscale;
        int a = neox ? i : 2 * i;
        int b = neox ? i + half : 2 * i + 1;
        float x = src[a], y = src[b];
        float ra = x * c - y * s, rb = x * s + y * c;
        if (isQ) {
            qd[a] = ra;
            qd[b] = rb;
        } else {
            sk[a] = ra;
            sk[b] = rb;
        }
    }
    if (isQ) return;
    const float* vsrc = v + t * vStride + (long long)h * headDim;
    for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
        if (d >= ropeDim) sk[d] = src[d];
        sv[d] = vsrc[d];
    }
    __syncthreads();
    long long row = slot * kvHeads + h;
    int groups = headDim / group;
    kvq_store_row<C>(sk, kc + row * headDim, ks + row * groups, headDim, group);
    if (vc != kc) kvq_store_row<C>(sv, vc + row * headDim, vs + row * groups, headDim, group);  // else the values are the keys
}
#define ROPE_KVQ(NAME, C)                                                                                    \
    extern "C" __global__ void NAME(float* q, const float* k, const float* v, int qs, int kst, int vst,       \
                                    unsigned char* kc, unsigned char* vc, float* ks, float* vs,              \
                                    const int* slots, const int* pos, const float* inv, float msc, int heads, \
                                    int kvh, int hd, int rd, int neox, int group) {                          \
        rope_kvq<C>(q, k, v, qs, kst, vst, kc, vc, ks, vs, slots, pos, inv, msc, heads, kvh, hd, rd, neox,    \
                    group);                                                                                  \
    }
ROPE_KVQ(rope_kvq_i8, KVQ_I8)
ROPE_KVQ(rope_kvq_e4m3, KVQ_E4M3)
ROPE_KVQ(rope_kvq_e5m2, KVQ_E5M2)

// kvq_store writes v (0 F32, 1 F16, 2 BF16 by kind) at out[i].
__device__ __forceinline__ void kvq_store(void* out, long long i, int kind, float v) {
    if (kind == 0)
        ((float*)out)[i] = v;
    else if (kind == 1)
        ((f16*)out)[i] = from_f32<f16>(v);
    else
        ((bf16*)out)[i] = from_f32<bf16>(v);
}

// ---- Grouped decode over a quantized cache ----
// attn_decode_grpq: attn_decode_grp (attention.cu) over codes: one block of 128 threads
// per (split, kv head, sequence) serves the G query heads of the kv head (G = 1, 2, 4 or
// 8), head size HD (64 or 128; groups of 32). Tiles of QT positions of K and V come
// through the block table with 16-byte loads of codes (and a scale per 16 codes) into
// registers, the next tile's loads issued before the current tile is computed; each tile
// is dequantized into float32 tiles in shared memory. Warp w scores heads w, w+4 (lane =
// position) with an online softmax in base 2; thread t accumulates output dimension t % HD
// of heads t / HD, t / HD + 128/HD, ... With one split the normalized output goes
// straight to out (outKind 0 f32, 1 f16, 2 bf16; zeros for a sequence without context);
// with more, each split writes its max (natural units), sum and unnormalized output to pm,
// pl, po ([seqs][heads][splits] and [...][HD]) for attn_combine.

#define QT 32        // positions per tile
#define QTHREADS 128 // threads per block

// KvqTile holds one thread's share of a tile's codes in registers: NU 16-code units of K
// and of V and their scales.
template <int NU>
struct KvqTile {
    uint4 k[NU], v[NU];
    float sk[NU], sv[NU];
};

// kvq_fetch loads positions k0 .. k0+n-1 of kv head kvh (through the block table) into
// the thread's registers: unit e = threadIdx.x + i * QTHREADS is row e / (HD/16), columns
// (e % (HD/16)) * 16 ..; rows past n load zeros.
template <int HD, int NU>
__device__ __forceinline__ void kvq_fetch(KvqTile<NU>& r, const unsigned char* kc, const unsigned char* vc,
                                          const float* ks, const float* vs, const int* bt, int k0, int n,
                                          int blockSize, int kvHeads, int kvh) {
    constexpr int UPR = HD / 16;  // units per row
#pragma unroll
    for (int i = 0; i < NU; i++) {
        int e = threadIdx.x + i * QTHREADS;
        int j = e / UPR, c = (e - j * UPR) * 16;
        uint4 zero = {0u, 0u, 0u, 0u};
        r.k[i] = r.v[i] = zero;
        r.sk[i] = r.sv[i] = 0.f;
        if (j < n) {
            int p = k0 + j;
            long long row = ((long long)bt[p / blockSize] * blockSize + p % blockSize) * kvHeads + kvh;
            r.k[i] = __ldg((const uint4*)(kc + row * HD + c));
            r.v[i] = __ldg((const uint4*)(vc + row * HD + c));
            long long si = row * (HD / 32) + c / 32;
            r.sk[i] = __ldg(ks + si);
            r.sv[i] = __ldg(vs + si);
        }
    }
}

// kvq_put dequantizes the registers of kvq_fetch into the float tiles sK (rows of KLD) and
// sV (rows of HD).
template <int C, int HD, int KLD, int NU>
__device__ __forceinline__ void kvq_put(const KvqTile<NU>& r, float* sK, float* sV) {
    constexpr int UPR = HD / 16;
#pragma unroll
    for (int i = 0; i < NU; i++) {
        int e = threadIdx.x + i * QTHREADS;
        int j = e / UPR, c = (e - j * UPR) * 16;
        float f[16];
        kvq_unit<C>(r.k[i], r.sk[i], f);
#pragma unroll
        for (int x = 0; x < 16; x += 4) {
            float4 t = {f[x], f[x + 1], f[x + 2], f[x + 3]};
            *(float4*)&sK[j * KLD + c + x] = t;
        }
        kvq_unit<C>(r.v[i], r.sv[i], f);
#pragma unroll
        for (int x = 0; x < 16; x += 4) {
            float4 t = {f[x], f[x + 1], f[x + 2], f[x + 3]};
            *(float4*)&sV[j * HD + c + x] = t;
        }
    }
}

template <int C, int HD, int G>
__device__ void attn_decode_grpq(void* out, int outStride, int outKind, const float* q, int qStride,
                                 const unsigned char* kc, const unsigned char* vc, const float* ks, const float* vs,
                                 const int* blockTables, int maxBlocks, const int* ctxLens, float* pm, float* pl,
                                 float* po, int heads, int kvHeads, int blockSize, int splitLen, float scale) {
    constexpr int KLD = HD + 4;              // K row stride: 16 bytes of padding keep lanes on distinct banks
    constexpr int HG = QTHREADS / HD;        // head groups of the PV phase (1 or 2)
    constexpr int NA = (G + HG - 1) / HG;    // accumulators per thread
    constexpr int NW = (G + 3) / 4;          // heads per warp in the score phase
    constexpr int NU = QT * HD / 16 / QTHREADS;  // 16-code units per thread per tile
    __shared__ __align__(16) float sQ[G * HD];
    __shared__ __align__(16) float sK[QT * KLD];
    __shared__ __align__(16) float sV[QT * HD];
    __shared__ float sP[QT][G];
    __shared__ float sCorr[G], sM[G], sL[G];
    pdl_entry();
    int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z, splits = gridDim.x;
    int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    int ctx = ctxLens[s];
    int start = split * splitLen, end = min(ctx, start + splitLen);
    const float qscale = scale * 1.4426950408889634f;  // scores in base 2
    const float* qp = q + (long long)s * qStride + (long long)kvh * G * HD;
    for (int i = tid; i < G * HD; i += QTHREADS) sQ[i] = qp[i] * qscale;
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

    KvqTile<NU> reg;
    if (start < end) kvq_fetch<HD, NU>(reg, kc, vc, ks, vs, bt, start, min(QT, end - start), blockSize, kvHeads, kvh);
    for (int k0 = start; k0 < end; k0 += QT) {
        int n = min(QT, end - k0);
        __syncthreads();  // the previous tile is consumed (and sQ written)
        kvq_put<C, HD, KLD, NU>(reg, sK, sV);
        __syncthreads();
        if (k0 + QT < end)  // the next tile's loads fly while this one is computed
            kvq_fetch<HD, NU>(reg, kc, vc, ks, vs, bt, k0 + QT, min(QT, end - k0 - QT), blockSize, kvHeads, kvh);
#pragma unroll
        for (int k = 0; k < NW; k++) {
            int g = w + 4 * k;
            if (g < G) {
                float sc = -KV_INF;
                if (lane < n) {
                    const float* kr = &sK[lane * KLD];
                    const float* qg = &sQ[g * HD];
                    float d0 = 0.f, d1 = 0.f;
#pragma unroll
                    for (int c = 0; c < HD; c += 4) {
                        float4 kv = *(const float4*)(kr + c), qv = *(const float4*)(qg + c);
                        d0 += qv.x * kv.x + qv.y * kv.y;
                        d1 += qv.z * kv.z + qv.w * kv.w;
                    }
                    sc = d0 + d1;
                }
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
            float v = sV[j * HD + d];
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
            kvq_store(out, (long long)s * outStride + (long long)h * HD + d, outKind, L > 0.f ? acc[a] / L : 0.f);
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
}
// Instances are named attn_decode_grpq<headDim>g<group>_<code>.
#define ATTN_DECODE_GRPQ(NAME, C, HD, G)                                                                      \
    extern "C" __global__ void __launch_bounds__(QTHREADS) NAME(void* out, int os, int ok, const float* q,     \
                                    int qs, const unsigned char* kc, const unsigned char* vc, const float* ks, \
                                    const float* vs, const int* bt, int maxBlocks, const int* ctx, float* pm,  \
                                    float* pl, float* po, int heads, int kvh, int bs, int splitLen,            \
                                    float scale) {                                                             \
        attn_decode_grpq<C, HD, G>(out, os, ok, q, qs, kc, vc, ks, vs, bt, maxBlocks, ctx, pm, pl, po, heads,  \
                                   kvh, bs, splitLen, scale);                                                  \
    }
#define ATTN_DECODE_GRPQ_CODES(HD, G)                                              \
    ATTN_DECODE_GRPQ(attn_decode_grpq##HD##g##G##_i8, KVQ_I8, HD, G)               \
    ATTN_DECODE_GRPQ(attn_decode_grpq##HD##g##G##_e4m3, KVQ_E4M3, HD, G)           \
    ATTN_DECODE_GRPQ(attn_decode_grpq##HD##g##G##_e5m2, KVQ_E5M2, HD, G)
ATTN_DECODE_GRPQ_CODES(64, 1)
ATTN_DECODE_GRPQ_CODES(64, 2)
ATTN_DECODE_GRPQ_CODES(64, 4)
ATTN_DECODE_GRPQ_CODES(64, 8)
ATTN_DECODE_GRPQ_CODES(128, 1)
ATTN_DECODE_GRPQ_CODES(128, 2)
ATTN_DECODE_GRPQ_CODES(128, 4)
ATTN_DECODE_GRPQ_CODES(128, 8)

// ---- Varlen attention over a quantized cache ----
// attn_prefillq: attn_prefill (attention.cu) over codes, for any head size up to 256 and
// any group (the scale of element i is ks[i / group]): grid (ceil(maxQueryLen/16), heads,
// seqs), block 128. Sequence s owns query tokens [seqStarts[s], seqStarts[s+1]) of q (row
// t at t*qStride) and out (row t at t*outStride, outKind 0 f32, 1 f16, 2 bf16); its i-th
// token of qlen, at context index c = ctxLens[s]-qlen+i, attends to the cached positions
// max(0, c-window+1)..c (0..c when window is 0), each scaled score x replaced by
// softcap*tanh(x/softcap) when softcap > 0. K/V tiles of 16 positions are dequantized
// into shared memory and shared by the block's 16 queries, with an online softmax.

#define PQ_TQ 16  // query tokens per block (4 warps x 4)
#define PQ_QW 4   // query tokens per warp
#define PQ_KT 16  // keys per shared-memory tile
#define PQ_MAXC 8 // ceil(headDim / 32) at most

template <int C>
__device__ void attn_prefillq(void* out, int outStride, int outKind, const float* q, int qStride,
                              const unsigned char* kc, const unsigned char* vc, const float* ks, const float* vs,
                              const int* blockTables, int maxBlocks, const int* seqStarts, const int* ctxLens,
                              int heads, int kvHeads, int headDim, int group, int blockSize, float scale, int window,
                              float softcap) {
    __shared__ float kt[PQ_KT][256], vt[PQ_KT][256];
    pdl_entry();
    int tile = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    int q0 = seqStarts[s], qlen = seqStarts[s + 1] - q0;
    if (tile * PQ_TQ >= qlen) return;
    int c0 = ctxLens[s] - qlen;  // the context index of the sequence's first query token
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int nc = (headDim + 31) >> 5;
    int kvh = h / (heads / kvHeads);
    int groups = headDim / group;
    const int* bt = blockTables + (long long)s * maxBlocks;
    int kmax = c0 + min(qlen, (tile + 1) * PQ_TQ) - 1;  // the tile's last key position
    float qr[PQ_QW][PQ_MAXC], acc[PQ_QW][PQ_MAXC], m[PQ_QW], l[PQ_QW];
    int qpos[PQ_QW];
#pragma unroll
    for (int i = 0; i < PQ_QW; i++) {
        int t = tile * PQ_TQ + w * PQ_QW + i;
        qpos[i] = t < qlen ? c0 + t : -1;
        const float* qp = q + (long long)(q0 + (t < qlen ? t : 0)) * qStride + h * headDim;
#pragma unroll
        for (int c = 0; c < PQ_MAXC; c++) {
            int dd = lane + 32 * c;
            qr[i][c] = (qpos[i] >= 0 && c < nc && dd < headDim) ? qp[dd] * scale : 0.f;
            acc[i][c] = 0.f;
        }
        m[i] = -KV_INF;
        l[i] = 0.f;
    }
    int kmin = window > 0 ? max(0, c0 + tile * PQ_TQ - window + 1) : 0;  // the tile's first key seen
    for (int k0 = kmin / PQ_KT * PQ_KT; k0 <= kmax; k0 += PQ_KT) {
        __syncthreads();
        for (int e = threadIdx.x; e < PQ_KT * headDim; e += blockDim.x) {
            int j = e / headDim, dd = e - j * headDim;
            int p = k0 + j;
            float kv = 0.f, vv = 0.f;
            if (p <= kmax) {
                long long row = ((long long)bt[p / blockSize] * blockSize + p % blockSize) * kvHeads + kvh;
                long long si = row * groups + dd / group;
                kv = kvq_value<C>(kc[row * headDim + dd]) * ks[si];
                vv = kvq_value<C>(vc[row * headDim + dd]) * vs[si];
            }
            kt[j][dd] = kv;
            vt[j][dd] = vv;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < PQ_QW; i++) {
            int last = min(PQ_KT - 1, qpos[i] - k0);  // warp-uniform
            int first = window > 0 ? max(0, qpos[i] - window + 1 - k0) : 0;
            for (int j = first; j <= last; j++) {
                float dot = 0.f;
#pragma unroll
                for (int c = 0; c < PQ_MAXC; c++)
                    if (c < nc && lane + 32 * c < headDim) dot += qr[i][c] * kt[j][lane + 32 * c];
                dot = warp_sum(dot);
                if (softcap > 0.f) dot = softcap * tanhf(dot / softcap);
                float mn = fmaxf(m[i], dot);
                float corr = expf(m[i] - mn), e = expf(dot - mn);
                l[i] = l[i] * corr + e;
#pragma unroll
                for (int c = 0; c < PQ_MAXC; c++)
                    if (c < nc && lane + 32 * c < headDim) acc[i][c] = acc[i][c] * corr + e * vt[j][lane + 32 * c];
                m[i] = mn;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < PQ_QW; i++) {
        if (qpos[i] < 0) continue;
        int t = tile * PQ_TQ + w * PQ_QW + i;
        long long o = (long long)(q0 + t) * outStride + h * headDim;
        float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
        for (int c = 0; c < nc; c++)
            if (lane + 32 * c < headDim) kvq_store(out, o + lane + 32 * c, outKind, acc[i][c] * inv);
    }
}
// Instances are named attn_prefillq_<code>.
#define ATTN_PREFILLQ(NAME, C)                                                                                 \
    extern "C" __global__ void NAME(void* out, int os, int ok, const float* q, int qs, const unsigned char* kc, \
                                    const unsigned char* vc, const float* ks, const float* vs, const int* bt,  \
                                    int maxBlocks, const int* starts, const int* ctxLens, int heads, int kvh,  \
                                    int hd, int group, int bs, float scale, int window, float softcap) {       \
        attn_prefillq<C>(out, os, ok, q, qs, kc, vc, ks, vs, bt, maxBlocks, starts, ctxLens, heads, kvh, hd,   \
                         group, bs, scale, window, softcap);                                                   \
    }
ATTN_PREFILLQ(attn_prefillq_i8, KVQ_I8)
ATTN_PREFILLQ(attn_prefillq_e4m3, KVQ_E4M3)
ATTN_PREFILLQ(attn_prefillq_e5m2, KVQ_E5M2)
