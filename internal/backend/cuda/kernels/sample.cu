// Greedy argmax and top-k / top-p sampling on the device, under vocabulary masks.

// A step's vocabulary masks come in one buffer (uploadMasks in backend_sample.go): one word
// per row giving where the row's mask starts in the same buffer (0xffffffff: no mask),
// then the masks, ceil(vocab/32) words each; bit t%32 of word t/32 set allows token t. A
// null buffer means no row of the step has a mask.

// row_mask returns row's mask in masks, or null when the row has none.
__device__ __forceinline__ const unsigned int* row_mask(const unsigned int* masks, int row) {
    if (!masks) return nullptr;
    unsigned int off = masks[row];
    return off == 0xffffffffu ? nullptr : masks + off;
}

// mask_allows reports whether mask m (null: every token) allows token i.
__device__ __forceinline__ bool mask_allows(const unsigned int* m, int i) {
    return !m || ((m[i >> 5] >> (i & 31)) & 1u);
}

// masked_logit is token i's logit, or -inf when the row's mask m disallows it.
__device__ __forceinline__ float masked_logit(const float* lg, const unsigned int* m, int i) {
    return mask_allows(m, i) ? lg[i] : -KV_INF;
}

// Greedy argmax in two launches, so that a row of a large vocabulary is read by many
// multiprocessors at once: argmax_part_f32 reduces ARGMAX_PARTS slices of every row
// (grid = (ARGMAX_PARTS, rows), block = 256) to a (value, index) pair each in work, and
// argmax_f32 (grid = rows, block = 32) picks each row's best pair. out[row] = the index of
// the largest logit among the tokens the row's mask allows (the lowest index among ties;
// NaN never wins; 0 when no allowed logit is a number).
#define ARGMAX_PARTS 32

// argmax_better reports whether (v, i) beats (bv, bi): larger, or equal with a lower index
// (false for a NaN v).
__device__ __forceinline__ bool argmax_better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// argmax_warp leaves the warp's best (bv, bi) in every lane.
__device__ __forceinline__ void argmax_warp(float& bv, int& bi) {
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (argmax_better(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
        }
    }
}

extern "C" __global__ void argmax_part_f32(float* work, const float* logits, int vocab, const unsigned int* masks) {
    pdl_entry();
    __shared__ float sv[32];
    __shared__ int si[32];
    int part = blockIdx.x, row = blockIdx.y;
    int per = (vocab + ARGMAX_PARTS - 1) / ARGMAX_PARTS;
    int lo = part * per, hi = min(vocab, lo + per);
    const float* lg = logits + (long long)row * vocab;
    const unsigned int* m = row_mask(masks, row);
    float bv = -KV_INF;
    int bi = 0x7fffffff;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float v = lg[i];
        if (mask_allows(m, i) && argmax_better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    argmax_warp(bv, bi);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
        sv[w] = bv;
        si[w] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < nw; i++)
            if (argmax_better(sv[i], si[i], bv, bi)) {
                bv = sv[i];
                bi = si[i];
            }
        float* p = work + 2 * ((long long)row * ARGMAX_PARTS + part);
        p[0] = bv;
        p[1] = __int_as_float(bi);
    }
}

extern "C" __global__ void argmax_f32(int* out, const float* work) {
    pdl_entry();
    int row = blockIdx.x, lane = threadIdx.x;
    const float* p = work + 2 * ((long long)row * ARGMAX_PARTS + lane);
    float bv = p[0];
    int bi = __float_as_int(p[1]);
    argmax_warp(bv, bi);
    if (lane == 0) out[row] = bi == 0x7fffffff ? 0 : bi;
}

// order_key maps a float to an unsigned key with the same order (larger float, larger key).
__device__ __forceinline__ unsigned int order_key(float f) {
    unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// sample_f32: for each row (grid = rows, block = 1024) draws a token from
// softmax(logits / temps[row]) restricted to the top topks[row] logits (<= 0 or >= vocab:
// no limit) and then to the smallest set of those whose probability mass reaches
// topps[row] (>= 1: no limit); ties at either threshold are kept. The draw inverts the
// cumulative distribution in index order at uniforms[row] in [0, 1). temps[row] > 0. A
// token the row's mask disallows has the logit -inf; a masked row with no allowed finite
// logit draws 0.
extern "C" __global__ void sample_f32(int* out, const float* logits, int vocab, const float* temps,
                                      const int* topks, const float* topps, const float* uniforms,
                                      const unsigned int* masks) {
    __shared__ unsigned int hc[256];
    __shared__ float hm[256];
    __shared__ float sh[32];
    __shared__ unsigned int s_prefix, s_mask;
    __shared__ float s_rem;
    __shared__ unsigned int s_remc;
    __shared__ int s_found;
    const float* lg = logits + (long long)blockIdx.x * vocab;
    float invT = 1.f / temps[blockIdx.x];
    int topk = topks[blockIdx.x];
    float topp = topps[blockIdx.x];
    float u = uniforms[blockIdx.x];
    const unsigned int* m = row_mask(masks, blockIdx.x);
    int tid = threadIdx.x;

    float mx = -KV_INF;
    for (int i = tid; i < vocab; i += blockDim.x) mx = fmaxf(mx, masked_logit(lg, m, i));
    mx = block_max(mx, sh);
    if (m && mx == -KV_INF) {  // the mask allows nothing (the caller's bug)
        if (tid == 0) out[blockIdx.x] = 0;
        return;
    }

    unsigned int thr = 0;  // keep keys >= thr
    if (topk > 0 && topk < vocab) {
        // Radix select of the topk-th largest key, 8 bits at a time from the top.
        if (tid == 0) {
            s_prefix = 0;
            s_mask = 0;
            s_remc = (unsigned int)topk;
        }
        for (int shift = 24; shift >= 0; shift -= 8) {
            __syncthreads();
            for (int b = tid; b < 256; b += blockDim.x) hc[b] = 0;
            __syncthreads();
            unsigned int prefix = s_prefix, mask = s_mask;
            for (int i = tid; i < vocab; i += blockDim.x) {
                unsigned int key = order_key(masked_logit(lg, m, i));
                if ((key & mask) == prefix) atomicAdd(&hc[(key >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (tid == 0) {
                unsigned int cum = 0, rem = s_remc;
                int pick = 0;
                for (int b = 255; b >= 0; b--) {
                    if (cum + hc[b] >= rem) {
                        pick = b;
                        break;
                    }
                    cum += hc[b];
                }
                s_remc = rem - cum;
                s_prefix = prefix | ((unsigned int)pick << shift);
                s_mask = mask | (255u << shift);
            }
        }
        __syncthreads();
        thr = s_prefix;
    }
    if (topp < 1.f) {
        float z = 0.f;
        for (int i = tid; i < vocab; i += blockDim.x)
            if (order_key(masked_logit(lg, m, i)) >= thr) z += expf((masked_logit(lg, m, i) - mx) * invT);
        z = block_sum(z, sh);
        // Radix select of the key where the mass, taken from the top, reaches topp * z.
        if (tid == 0) {
            s_prefix = 0;
            s_mask = 0;
            s_rem = topp * z;
        }
        for (int shift = 24; shift >= 0; shift -= 8) {
            __syncthreads();
            for (int b = tid; b < 256; b += blockDim.x) hm[b] = 0.f;
            __syncthreads();
            unsigned int prefix = s_prefix, mask = s_mask;
            for (int i = tid; i < vocab; i += blockDim.x) {
                unsigned int key = order_key(masked_logit(lg, m, i));
                if ((key & mask) == prefix && key >= thr) atomicAdd(&hm[(key >> shift) & 255u], expf((masked_logit(lg, m, i) - mx) * invT));
            }
            __syncthreads();
            if (tid == 0) {
                float cum = 0.f, rem = s_rem;
                int pick = -1, lastNonEmpty = -1;
                for (int b = 255; b >= 0; b--) {
                    if (hm[b] <= 0.f) continue;
                    lastNonEmpty = b;
                    if (cum + hm[b] >= rem) {
                        pick = b;
                        break;
                    }
                    cum += hm[b];
                }
                if (pick < 0) {  // rounding left the target just out of reach: take all
                    pick = lastNonEmpty < 0 ? 0 : lastNonEmpty;
                    cum = cum - (lastNonEmpty < 0 ? 0.f : hm[pick]);
                }
                s_rem = rem - cum;
                s_prefix = prefix | ((unsigned int)pick << shift);
                s_mask = mask | (255u << shift);
            }
        }
        __syncthreads();
        thr = max(thr, s_prefix);
    }

    // Inverse-CDF draw over the kept tokens in index order.
    float z = 0.f;
    for (int i = tid; i < vocab; i += blockDim.x)
        if (order_key(masked_logit(lg, m, i)) >= thr) z += expf((masked_logit(lg, m, i) - mx) * invT);
    z = block_sum(z, sh);
    float target = u * z;
    if (tid == 0) s_found = 0x7fffffff;
    int lane = tid & 31, w = tid >> 5, nw = blockDim.x >> 5;
    float running = 0.f;
    int lastKept = -1;
    for (int base = 0; base < vocab; base += blockDim.x) {
        int i = base + tid;
        float e = 0.f;
        if (i < vocab && order_key(masked_logit(lg, m, i)) >= thr) {
            e = expf((masked_logit(lg, m, i) - mx) * invT);
            if (mask_allows(m, i)) lastKept = i;
        }
        // Block inclusive scan of e.
        float x = e;
        for (int o = 1; o < 32; o <<= 1) {
            float y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) x += y;
        }
        __syncthreads();
        if (lane == 31) sh[w] = x;
        __syncthreads();
        float before = 0.f, total = 0.f;
        for (int j = 0; j < nw; j++) {
            if (j < w) before += sh[j];
            total += sh[j];
        }
        float incl = running + before + x;
        if (e > 0.f && incl >= target) atomicMin(&s_found, i);
        __syncthreads();
        if (s_found != 0x7fffffff) break;
        running += total;
    }
    __syncthreads();
    if (s_found == 0x7fffffff) {  // rounding: fall back to the last kept token
        __shared__ int slk[32];
        int lk = lastKept;
        for (int o = 16; o > 0; o >>= 1) lk = max(lk, __shfl_xor_sync(0xffffffffu, lk, o));
        if (lane == 0) slk[w] = lk;
        __syncthreads();
        if (tid == 0) {
            int best = 0;
            for (int j = 0; j < nw; j++) best = max(best, slk[j]);
            out[blockIdx.x] = best;
        }
        return;
    }
    if (tid == 0) out[blockIdx.x] = s_found;
}
