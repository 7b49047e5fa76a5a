// Multi-LoRA: the low-rank updates of many adapters in one step (Punica's BGMV). Each
// token picks its adapter slot (slots[t], -1 for none); a projection's slots stack their
// A matrices, a = [slots*maxRank][in], and their B matrices transposed (scale folded in),
// b = [slots*maxRank][out]; slot s uses its first ranks[s] ranks.
//
// Up to three projections that take the same input x (q, k and v; gate and up) form one
// group and share one launch: member g has its own a_g, b_g, output and width n_g.

// LORA_CHUNK ranks are summed at a time in registers.
#define LORA_CHUNK 16

__device__ __forceinline__ const float* lora_pick(int g, const float* p0, const float* p1, const float* p2) {
    return g == 0 ? p0 : (g == 1 ? p1 : p2);
}

// lora_group_f32: out_g[t][o] += sum over j < r of b_g[s*maxRank + j][o] * (a_g[s*maxRank + j]
// . x[t]) for each token t of slot s >= 0 (r = ranks[s]) and each member g. Both products in
// one launch, with no dependency between blocks: grid = (tokens, c0 + c1 + c2), c_g =
// ceil(n_g / cols) column blocks of member g; a block (a multiple of 32 threads, at most
// 1024) first takes the token's r dots with a_g (each thread its stride of x[t], LORA_CHUNK
// ranks at a time, then the warps' sums) into shared memory (maxRank floats, dynamic),
// then adds its cols outputs. The column blocks of a member repeat its dots, which cost
// about what their columns do when cols is about in.
extern "C" __global__ void lora_group_f32(float* o0, float* o1, float* o2, const float* x,
                                          const float* a0, const float* a1, const float* a2,
                                          const float* b0, const float* b1, const float* b2,
                                          const int* slots, const int* ranks, int in,
                                          int n0, int n1, int n2, int cols, int maxRank) {
    __shared__ float sh[LORA_CHUNK][32];
    extern __shared__ float us[];
    pdl_entry();
    long long t = blockIdx.x;
    int s = slots[t];
    // Uniform over the block: the whole block returns or none of it.
    if (s < 0) return;
    int c0 = (n0 + cols - 1) / cols, c1 = (n1 + cols - 1) / cols;
    int cb = blockIdx.y, g = 0;
    if (cb >= c0) {
        cb -= c0;
        g = 1;
        if (cb >= c1) {
            cb -= c1;
            g = 2;
        }
    }
    int n = g == 0 ? n0 : (g == 1 ? n1 : n2);
    int r = ranks[s], lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const float* a = lora_pick(g, a0, a1, a2) + (long long)s * maxRank * in;
    const float* xr = x + t * in;
    for (int j0 = 0; j0 < r; j0 += LORA_CHUNK) {
        float acc[LORA_CHUNK];
#pragma unroll
        for (int j = 0; j < LORA_CHUNK; j++) acc[j] = 0.f;
        int m = min(LORA_CHUNK, r - j0);
        // Rows past the slot's rank read its last row again (their sums are dropped): the
        // loads carry no condition, so the compiler issues all of them before the first
        // multiply-add waits on one.
        const float* rows[LORA_CHUNK];
#pragma unroll
        for (int j = 0; j < LORA_CHUNK; j++) rows[j] = a + (long long)(j0 + min(j, m - 1)) * in;
        for (int i = threadIdx.x; i < in; i += blockDim.x) {
            float xv = xr[i];
#pragma unroll
            for (int j = 0; j < LORA_CHUNK; j++) acc[j] += rows[j][i] * xv;
        }
#pragma unroll
        for (int j = 0; j < LORA_CHUNK; j++) {
            float v = warp_sum(acc[j]);
            if (lane == 0) sh[j][warp] = v;
        }
        __syncthreads();
        if (warp == 0) {
            for (int j = 0; j < m; j++) {
                float v = warp_sum(lane < warps ? sh[j][lane] : 0.f);
                if (lane == 0) us[j0 + j] = v;
            }
        }
        __syncthreads();
    }
    float* out = (g == 0 ? o0 : (g == 1 ? o1 : o2)) + t * n;
    const float* b = lora_pick(g, b0, b1, b2) + (long long)s * maxRank * n;
    int end = min(n, (cb + 1) * cols);
    for (int o = cb * cols + threadIdx.x; o < end; o += blockDim.x) {
        float acc = 0.f;
        for (int j0 = 0; j0 < r; j0 += LORA_CHUNK) {
            // As above: ranks past r read row r-1 with a weight of zero.
#pragma unroll
            for (int j = 0; j < LORA_CHUNK; j++) {
                int jj = min(j0 + j, r - 1);
                acc += b[(long long)jj * n + o] * (j0 + j < r ? us[jj] : 0.f);
            }
        }
        out[o] += acc;
    }
}
