// Mixture of experts: routing, the token-expert pairs grouped by expert (a counting sort),
// the grouped GEMVs that run every expert's rows in one launch (each block finding its
// expert's weights in a device table, so the routing never visits the host and a step
// stays capturable as a graph), the weighted combine, and the shared expert's sigmoid gate.
//
// A step of n tokens routed to k experts each has P = n*k pairs, pair p = t*k + j being
// token t's j-th expert. moe_sort orders the pairs by expert (stable: token order within an
// expert), so that the rows of x gathered in that order (moe_gather_f32) are contiguous per
// expert, and cuts each expert's rows into chunks of at most NT rows (the GEMV's token
// bucket): chunk c = {expert, first sorted row, rows}, rows = 0 past the last chunk.

// MOE_MAX_EXPERTS bounds the experts moe_sort counts in shared memory (cuda.MoEMaxExperts).
#define MOE_MAX_EXPERTS 1024

// MOE_ROUTE_LANE is the most experts a lane of moe_route_f32 holds (1024 experts a warp).
#define MOE_ROUTE_LANE 32

// moe_route_f32: for each of n tokens (one warp a token, lane l holding experts l, l+32,
// ...), the softmax of its router logits in double precision (as the CPU backend computes
// it), then the k (<= 32) experts of highest probability, best first, the lower index
// winning a tie, into ids ([n][k]), with their probabilities (renormalized over the chosen
// ones when normalize is set) into gains.
extern "C" __global__ void moe_route_f32(int* ids, float* gains, const float* logits, int n, int experts, int k, int normalize) {
    long long t = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (t >= n) return;  // a whole warp
    const float* l = logits + t * experts;
    double p[MOE_ROUTE_LANE];
    double mx = __longlong_as_double(0xfff0000000000000ULL);  // -inf
#pragma unroll
    for (int i = 0; i < MOE_ROUTE_LANE; i++) {
        int e = lane + 32 * i;
        p[i] = e < experts ? (double)l[e] : 0.0;
        if (e < experts) mx = fmax(mx, p[i]);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < MOE_ROUTE_LANE; i++) {
        if (lane + 32 * i < experts) {
            p[i] = exp(p[i] - mx);
            sum += p[i];
        }
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
    for (int i = 0; i < MOE_ROUTE_LANE; i++) p[i] = lane + 32 * i < experts ? p[i] / sum : -1.0;  // -1: no expert
    double tot = 0.0, mine = 0.0;
    for (int j = 0; j < k; j++) {
        double bp = -1.0;
        int be = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < MOE_ROUTE_LANE; i++) {
            if (p[i] > bp) bp = p[i], be = lane + 32 * i;
        }
        for (int o = 16; o > 0; o >>= 1) {
            double op = __shfl_xor_sync(0xffffffffu, bp, o);
            int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (op > bp || (op == bp && oe < be)) bp = op, be = oe;
        }
#pragma unroll
        for (int i = 0; i < MOE_ROUTE_LANE; i++) {
            if (lane + 32 * i == be) p[i] = -1.0;  // taken
        }
        if (lane == 0) ids[t * k + j] = be;
        if (lane == j) mine = bp;
        tot += bp;
    }
    if (lane < k) gains[t * k + lane] = (float)(normalize ? mine / tot : mine);
}

// moe_sort: one block. order[r] is the pair at sorted row r (-1 past the valid pairs),
// pos[p] the sorted row of pair p (-1 for an expert id outside [0, experts), which
// contributes nothing), counts[e] expert e's pairs, chunks[3c..3c+2] chunk c (see above) for
// c < maxChunks.
extern "C" __global__ void __launch_bounds__(1024) moe_sort(int* order, int* pos, int* chunks, int* counts, const int* ids,
                                                            int pairs, int experts, int nt, int maxChunks) {
    __shared__ int cnt[MOE_MAX_EXPERTS], off[MOE_MAX_EXPERTS];
    int tid = threadIdx.x, bd = blockDim.x;
    for (int e = tid; e < experts; e += bd) cnt[e] = 0;
    for (int p = tid; p < pairs; p += bd) order[p] = -1, pos[p] = -1;
    for (int c = tid; c < 3 * maxChunks; c += bd) chunks[c] = 0;
    __syncthreads();
    for (int p = tid; p < pairs; p += bd) {
        int e = ids[p];
        if (e >= 0 && e < experts) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (tid == 0) {
        int o = 0, c = 0;
        for (int e = 0; e < experts; e++) {
            off[e] = o;
            counts[e] = cnt[e];
            for (int s = 0; s < cnt[e]; s += nt, c++) {
                if (c < maxChunks) chunks[3 * c] = e, chunks[3 * c + 1] = o + s, chunks[3 * c + 2] = min(nt, cnt[e] - s);
            }
            o += cnt[e];
        }
    }
    __syncthreads();
    for (int e = tid; e < experts; e += bd) {
        int r = off[e];
        for (int p = 0; p < pairs; p++) {
            if (ids[p] == e) order[r] = p, pos[p] = r, r++;
        }
    }
}

// moe_gather_f32: row r of xs ([pairs][dim]) is the row of x of the token of pair
// order[r] (k pairs a token), zeros for order[r] < 0; grid = pairs.
extern "C" __global__ void moe_gather_f32(float* xs, const float* x, const int* order, int k, int dim) {
    long long r = blockIdx.x;
    int p = order[r];
    float* dst = xs + r * dim;
    const float* src = x + (long long)(p < 0 ? 0 : p / k) * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = p < 0 ? 0.f : src[i];
}

// moe_combine_f32: out[t] = sum over j of gains[t][j] * ys[pos[t*k+j]] (pairs of pos < 0
// skipped), in j order; grid = tokens. out is overwritten.
extern "C" __global__ void moe_combine_f32(float* out, const float* ys, const int* pos, const float* gains, int k, int dim) {
    long long t = blockIdx.x;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float s = 0.f;
        for (int j = 0; j < k; j++) {
            int r = pos[t * k + j];
            if (r >= 0) s += gains[t * k + j] * ys[(long long)r * dim + i];
        }
        out[t * dim + i] = s;
    }
}

// The grouped GEMVs: grid = (row blocks of the weights' m rows, maxChunks). Block (b, c)
// multiplies chunk c's rows of the sorted x ([pairs][k]) by rows b*R.. of its expert's
// matrix `which` (0 gate, 1 up, 2 down: table holds three device addresses an expert) into
// the same rows of y ([pairs][m]), with the dense GEMVs' code (gemvqs_rows, gemv_rows), so
// each product is summed as a one-token MatMul sums it.
template <typename Q, int NT>
__device__ __forceinline__ void moe_gemvq(float* y, const float* x, const unsigned long long* table, int which, const int* chunks,
                                          int k, int m) {
    const int* c = chunks + 3 * blockIdx.y;
    int rows = c[2];
    if (rows == 0) return;
    long long start = c[1];
    const unsigned char* w = (const unsigned char*)table[3 * c[0] + which];
    gemvqs_rows<Q, 4, NT, 4, false>(blockIdx.x, y + start * m, x + start * k, nullptr, nullptr, w, rows, k, m);
}

template <typename T, int R, int NT, bool NOL1, bool GLU>
__device__ __forceinline__ void moe_gemv(float* y, const float* x, const unsigned long long* table, int which, const int* chunks,
                                         int k, int m) {
    const int* c = chunks + 3 * blockIdx.y;
    int rows = c[2];
    if (rows == 0) return;
    long long start = c[1];
    const T* w = (const T*)table[3 * c[0] + (GLU ? 0 : which)];
    const T* u = GLU ? (const T*)table[3 * c[0] + 1] : w;
    gemv_rows<T, R, NT, NOL1, GLU>(blockIdx.x, y + start * m, x + start * k, w, u, rows, k, m);
}

#define MOE_GEMVQ(Q, NT)                                                                                         \
    extern "C" __global__ void __launch_bounds__(128) moe_gemvq_n##NT##_##Q(                                     \
        float* y, const float* x, const unsigned long long* table, int which, const int* chunks, int k, int m) { \
        moe_gemvq<Q, NT>(y, x, table, which, chunks, k, m);                                                      \
    }
#define MOE_GEMVQ_TYPE(Q) MOE_GEMVQ(Q, 1) MOE_GEMVQ(Q, 2) MOE_GEMVQ(Q, 4) MOE_GEMVQ(Q, 8)
MOE_GEMVQ_TYPE(q8_0)
MOE_GEMVQ_TYPE(q4_0)
MOE_GEMVQ_TYPE(q4_1)
MOE_GEMVQ_TYPE(q5_0)
MOE_GEMVQ_TYPE(q5_1)
MOE_GEMVQ_TYPE(q4_k)
MOE_GEMVQ_TYPE(q5_k)
MOE_GEMVQ_TYPE(q6_k)
MOE_GEMVQ_TYPE(q2_k)
MOE_GEMVQ_TYPE(q3_k)
MOE_GEMVQ_TYPE(q8_0r)
MOE_GEMVQ_TYPE(q6_kr)

// The 16-bit twins, with the dense kernels' rows a block (gemvKernel, gemvGLUKernel in
// gemv.go): moe_gemv_* one matrix, moe_gemvglu_* y = silu(x · gateᵀ) * (x · upᵀ).
#define MOE_GEMV(NAME, T, R, NT, NOL1, GLU)                                                                      \
    extern "C" __global__ void __launch_bounds__(GEMV_THREADS)                                                   \
        NAME(float* y, const float* x, const unsigned long long* table, int which, const int* chunks, int k, int m) { \
        moe_gemv<T, R, NT, NOL1, GLU>(y, x, table, which, chunks, k, m);                                         \
    }
#define MOE_GEMV_TYPE(T)                                                  \
    MOE_GEMV(moe_gemv_n1_##T, T, 8, 1, false, false)                      \
    MOE_GEMV(moe_gemv_n2_##T, T, 4, 2, true, false)                       \
    MOE_GEMV(moe_gemv_n4_##T, T, 4, 4, true, false)                       \
    MOE_GEMV(moe_gemv_n8_##T, T, 4, 8, true, false)                       \
    MOE_GEMV(moe_gemvglu_n1_##T, T, 1, 1, false, true)                    \
    MOE_GEMV(moe_gemvglu_n2_##T, T, 2, 2, true, true)                     \
    MOE_GEMV(moe_gemvglu_n4_##T, T, 2, 4, true, true)                     \
    MOE_GEMV(moe_gemvglu_n8_##T, T, 2, 8, true, true)
MOE_GEMV_TYPE(bf16)
MOE_GEMV_TYPE(f16)

// moe_gemv_f32: the grouped GEMV of F32 experts (any k): a warp a weight row, over the
// chunk's rows one after another; grid.x = ceil(m / 8) for 256 threads.
extern "C" __global__ void __launch_bounds__(256) moe_gemv_f32(float* y, const float* x, const unsigned long long* table, int which,
                                                               const int* chunks, int k, int m) {
    const int* c = chunks + 3 * blockIdx.y;
    int rows = c[2];
    if (rows == 0) return;
    long long start = c[1], r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= m) return;
    int lane = threadIdx.x & 31;
    const float* w = (const float*)table[3 * c[0] + which] + r * k;
    for (int t = 0; t < rows; t++) {
        const float* xr = x + (start + t) * k;
        float s = 0.f;
        for (int i = lane; i < k; i += 32) s += w[i] * xr[i];
        s = warp_sum(s);
        if (lane == 0) y[(start + t) * m + r] = s;
    }
}

// gated_add_f32: out[t] += sigmoid(x[t] · gate) * y[t] (Qwen2-MoE's shared expert gate;
// out and y [rows][dim], x [rows][xd], gate [xd]); grid = rows.
extern "C" __global__ void gated_add_f32(float* out, const float* y, const float* x, const float* gate, int dim, int xd) {
    __shared__ float sh[32];
    long long t = blockIdx.x;
    float d = 0.f;
    for (int i = threadIdx.x; i < xd; i += blockDim.x) d += x[t * xd + i] * gate[i];
    d = block_sum(d, sh);
    float g = 1.f / (1.f + expf(-d));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) out[t * dim + i] += g * y[t * dim + i];
}
