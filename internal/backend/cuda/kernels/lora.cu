// Multi-LoRA: the low-rank updates of many adapters in one step (Punica's BGMV). Each
// token picks its adapter slot (slots[t], -1 for none); a projection's slots stack their
// A matrices, a = [slots*maxRank][in], and their B matrices transposed (scale folded in),
// b = [slots*maxRank][out]; slot s uses its first ranks[s] ranks.
//
// Up to three projections that take the same input x (q, k and v; gate and up) form one
// group and share each kernel's launch: member g has its own a_g, b_g, output and width,
// and its ranks sit at columns [g*maxRank, (g+1)*maxRank) of the scratch u.

// LORA_CHUNK ranks are summed at a time in registers.
#define LORA_CHUNK 16

__device__ __forceinline__ const float* lora_pick(int g, const float* p0, const float* p1, const float* p2) {
    return g == 0 ? p0 : (g == 1 ? p1 : p2);
}

// lora_shrink_group_f32: u[t][g*maxRank + j] = a_g[s*maxRank + j] . x[t] for each token t
// of slot s >= 0 and j < ranks[s]; grid = (tokens, members), block = a multiple of 32
// threads (at most 1024), each thread summing its stride of x[t] against LORA_CHUNK rows of
// a_g at a time, then the warps' sums and the block's.
extern "C" __global__ void lora_shrink_group_f32(float* u, const float* x, const float* a0, const float* a1, const float* a2,
                                                 const int* slots, const int* ranks, int in, int maxRank, int uCols) {
    __shared__ float sh[LORA_CHUNK][32];
    pdl_entry();
    int g = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    long long t = blockIdx.x;
    int s = slots[t];
    // Uniform over the block: the whole block returns or none of it.
    if (s < 0) return;
    int r = ranks[s];
    const float* a = lora_pick(g, a0, a1, a2) + (long long)s * maxRank * in;
    const float* xr = x + t * in;
    float* ut = u + t * uCols + g * maxRank;
    for (int j0 = 0; j0 < r; j0 += LORA_CHUNK) {
        float acc[LORA_CHUNK];
#pragma unroll
        for (int j = 0; j < LORA_CHUNK; j++) acc[j] = 0.f;
        int n = min(LORA_CHUNK, r - j0);
        for (int i = threadIdx.x; i < in; i += blockDim.x) {
            float xv = xr[i];
#pragma unroll
            for (int j = 0; j < LORA_CHUNK; j++)
                if (j < n) acc[j] += a[(long long)(j0 + j) * in + i] * xv;
        }
#pragma unroll
        for (int j = 0; j < LORA_CHUNK; j++) {
            float v = warp_sum(acc[j]);
            if (lane == 0) sh[j][warp] = v;
        }
        __syncthreads();
        if (warp == 0) {
            for (int j = 0; j < n; j++) {
                float v = warp_sum(lane < warps ? sh[j][lane] : 0.f);
                if (lane == 0) ut[j0 + j] = v;
            }
        }
        __syncthreads();
    }
}

// lora_expand_group_f32: out_g[t][o] += sum over j < r of b_g[s*maxRank + j][o] *
// u[t][g*maxRank + j] for each token t of slot s >= 0, r = ranks[s]. grid = (tokens,
// c0 + c1 + c2) with c_g = ceil(n_g / blockDim.x) column blocks of member g; a thread per
// output (the threads of a warp read neighbouring columns of b).
extern "C" __global__ void lora_expand_group_f32(float* o0, float* o1, float* o2, const float* u,
                                                 const float* b0, const float* b1, const float* b2,
                                                 const int* slots, const int* ranks,
                                                 int n0, int n1, int n2, int maxRank, int uCols) {
    pdl_entry();
    long long t = blockIdx.x;
    int s = slots[t];
    if (s < 0) return;
    int c0 = (n0 + blockDim.x - 1) / blockDim.x, c1 = (n1 + blockDim.x - 1) / blockDim.x;
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
    int o = cb * blockDim.x + threadIdx.x;
    if (o >= n) return;
    float* out = g == 0 ? o0 : (g == 1 ? o1 : o2);
    const float* bs = lora_pick(g, b0, b1, b2) + (long long)s * maxRank * n + o;
    const float* ut = u + t * uCols + g * maxRank;
    int r = ranks[s];
    float acc = 0.f;
    for (int j = 0; j < r; j++) acc += bs[(long long)j * n] * ut[j];
    out[t * n + o] += acc;
}
