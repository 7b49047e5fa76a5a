// Multi-LoRA: the low-rank updates of many adapters in one step (Punica's BGMV). Each
// token picks its adapter slot (slots[t], -1 for none); a projection's slots stack their
// A matrices, a = [slots*maxRank][in], and their B matrices transposed (scale folded in),
// b = [slots*maxRank][out]; slot s uses its first ranks[s] ranks.

// lora_shrink_f32: u[t][j] = a[s*maxRank+j] . x[t] for each token t of slot s >= 0 and
// j < ranks[s]; grid = (tokens, maxRank), a block (a multiple of 32 threads) sums one dot.
extern "C" __global__ void lora_shrink_f32(float* u, const float* x, const float* a, const int* slots, const int* ranks, int in, int maxRank) {
    __shared__ float sh[32];
    long long t = blockIdx.x;
    int j = blockIdx.y;
    int s = slots[t];
    // Uniform over the block: the whole block returns or none of it.
    if (s < 0 || j >= ranks[s]) return;
    const float* ar = a + ((long long)s * maxRank + j) * in;
    const float* xr = x + t * in;
    float acc = 0.f;
    for (int i = threadIdx.x; i < in; i += blockDim.x) acc += ar[i] * xr[i];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) u[t * maxRank + j] = acc;
}

// lora_expand_f32: out[t][o] += sum over j < r of b[s*maxRank+j][o] * u[t][j] for each
// token t of slot s >= 0, r = ranks[s]; grid = (tokens, ceil(out / blockDim.x)), a thread
// per output (the threads of a warp read neighbouring columns of b).
extern "C" __global__ void lora_expand_f32(float* out, const float* u, const float* b, const int* slots, const int* ranks, int outDim, int maxRank) {
    long long t = blockIdx.x;
    int o = blockIdx.y * blockDim.x + threadIdx.x;
    int s = slots[t];
    if (s < 0 || o >= outDim) return;
    int r = ranks[s];
    const float* bs = b + (long long)s * maxRank * outDim + o;
    const float* ut = u + t * maxRank;
    float acc = 0.f;
    for (int j = 0; j < r; j++) acc += bs[(long long)j * outDim] * ut[j];
    out[t * outDim + o] += acc;
}
