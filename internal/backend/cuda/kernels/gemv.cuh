// The 16-bit GEMV of small batches (decode) as a template, gemv_rows, shared by gemv.cu and moe.cu.

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
