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
// LORA_EXPAND_TOKENS tokens share an expand thread, so a thread reloads its column of B
// only when the next token's slot differs.
#define LORA_EXPAND_TOKENS 8

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
// u[t][g*maxRank + j] for each token t of slot s >= 0, r = ranks[s]. grid =
// (ceil(tokens / LORA_EXPAND_TOKENS), c0 + c1 + c2) with c_g = ceil(n_g / blockDim.x)
// column blocks of member g; a thread per output column and LORA_EXPAND_TOKENS tokens,
// holding its column's LORA_CHUNK values of b in registers while the slot stays the same.
extern "C" __global__ void lora_expand_group_f32(float* o0, float* o1, float* o2, const float* u,
                                                 const float* b0, const float* b1, const float* b2,
                                                 const int* slots, const int* ranks, int tokens,
                                                 int n0, int n1, int n2, int maxRank, int uCols) {
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
    const float* b = lora_pick(g, b0, b1, b2);
    long long t0 = (long long)blockIdx.x * LORA_EXPAND_TOKENS;
    float acc[LORA_EXPAND_TOKENS];
    int slot[LORA_EXPAND_TOKENS];
    int rmax = 0;
#pragma unroll
    for (int k = 0; k < LORA_EXPAND_TOKENS; k++) {
        acc[k] = 0.f;
        slot[k] = t0 + k < tokens ? slots[t0 + k] : -1;
        if (slot[k] >= 0) rmax = max(rmax, ranks[slot[k]]);
    }
    for (int j0 = 0; j0 < rmax; j0 += LORA_CHUNK) {
        float bv[LORA_CHUNK];
        int held = -1;
#pragma unroll
        for (int k = 0; k < LORA_EXPAND_TOKENS; k++) {
            int s = slot[k];
            if (s < 0) continue;
            int r = min(LORA_CHUNK, ranks[s] - j0);
            if (r <= 0) continue;
            if (s != held) {
                const float* bs = b + ((long long)s * maxRank + j0) * n + o;
#pragma unroll
                for (int j = 0; j < LORA_CHUNK; j++) bv[j] = j0 + j < maxRank ? bs[(long long)j * n] : 0.f;
                held = s;
            }
            const float* ut = u + (t0 + k) * uCols + g * maxRank + j0;
#pragma unroll
            for (int j = 0; j < LORA_CHUNK; j++)
                if (j < r) acc[k] += bv[j] * ut[j];
        }
    }
#pragma unroll
    for (int k = 0; k < LORA_EXPAND_TOKENS; k++)
        if (slot[k] >= 0) out[(t0 + k) * n + o] += acc[k];
}
