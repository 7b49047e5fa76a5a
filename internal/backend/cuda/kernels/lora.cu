// Multi-LoRA: the low-rank updates of many adapters in one step (Punica's SGMV: the step's
// tokens grouped by adapter). Each token picks its adapter slot (slots[t], -1 for none); a projection's slots stack their
// A matrices, a = [slots*maxRank][in], and their B matrices transposed (scale folded in),
// b = [slots*maxRank][out]; slot s uses its first ranks[s] ranks.
//
// Up to three projections that take the same input x (q, k and v; gate and up) form one
// group and share one launch: member g has its own a_g, b_g, output and width n_g.

// LORA_TILE tokens of one slot share a block (cuda.LoRATile): the block reads its slot's A
// or B rows once for all of them, instead of once a token. The host groups the step's
// tokens by slot (order: token indices, slot by slot) into tiles of at most LORA_TILE
// tokens of one slot (tiles[i] = start << 4 | count into order; count 0 for an unused tile).
// The kernels' time is the latency of their loads, so every load of a stride or of a rank
// chunk carries no condition and is issued before the first multiply-add waits on one.
#define LORA_TILE 8
// LORA_RANKS ranks of a tile make one block of the shrink: LORA_RANKS x LORA_TILE sums a
// thread, one value a lane after warp_sums.
#define LORA_RANKS 4
#define LORA_WARPS 8

__device__ __forceinline__ const float* lora_pick(int g, const float* p0, const float* p1, const float* p2) {
    return g == 0 ? p0 : (g == 1 ? p1 : p2);
}

// lora_tile reads tile i's token indices into tok (repeating the last past its count, so
// that loads need no condition) and returns its count (0: an unused tile).
__device__ __forceinline__ int lora_tile(const int* tiles, const int* order, int i, int* tok) {
    int tile = tiles[i], cnt = tile & 15, start = tile >> 4;
#pragma unroll
    for (int k = 0; k < LORA_TILE; k++) tok[k] = cnt ? order[start + min(k, cnt - 1)] : 0;
    return cnt;
}

// lora_shrink_f32: u[t][g*maxRank + j] = a_g[s*maxRank + j] . x[t] for each token t of slot
// s >= 0, j < ranks[s], and member g (u has uCols columns). grid = (tiles, members *
// chunks) with chunks = ceil(maxRank / LORA_RANKS), block = 32 * LORA_WARPS: a block takes
// LORA_RANKS ranks of one member for its tile, each thread striding the input and keeping
// the sums of its stride, the warps' sums meeting in shared memory.
extern "C" __global__ void __launch_bounds__(32 * LORA_WARPS)
    lora_shrink_f32(float* u, const float* x, const float* a0, const float* a1, const float* a2, const int* slots,
                    const int* ranks, const int* order, const int* tiles, int in, int maxRank, int uCols) {
    __shared__ float part[LORA_WARPS][32];
    pdl_entry();
    int tok[LORA_TILE];
    int cnt = lora_tile(tiles, order, blockIdx.x, tok);
    int chunks = (maxRank + LORA_RANKS - 1) / LORA_RANKS, g = blockIdx.y / chunks, j0 = (blockIdx.y % chunks) * LORA_RANKS;
    // Uniform over the block: the whole block returns or none of it.
    if (cnt == 0) return;
    int s = slots[tok[0]], r = ranks[s];
    if (j0 >= r) return;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float* a = lora_pick(g, a0, a1, a2) + (long long)s * maxRank * in;
    // Ranks past r read row r - 1 again; their sums are dropped.
    const float *ar[LORA_RANKS], *xr[LORA_TILE];
#pragma unroll
    for (int j = 0; j < LORA_RANKS; j++) ar[j] = a + (long long)min(j0 + j, r - 1) * in;
#pragma unroll
    for (int k = 0; k < LORA_TILE; k++) xr[k] = x + (long long)tok[k] * in;
    float acc[LORA_RANKS * LORA_TILE];
#pragma unroll
    for (int v = 0; v < LORA_RANKS * LORA_TILE; v++) acc[v] = 0.f;
#pragma unroll 4
    for (int i = threadIdx.x; i < in; i += 32 * LORA_WARPS) {
        float xv[LORA_TILE], av[LORA_RANKS];
#pragma unroll
        for (int k = 0; k < LORA_TILE; k++) xv[k] = xr[k][i];
#pragma unroll
        for (int j = 0; j < LORA_RANKS; j++) av[j] = ar[j][i];
#pragma unroll
        for (int j = 0; j < LORA_RANKS; j++)
#pragma unroll
            for (int k = 0; k < LORA_TILE; k++) acc[j * LORA_TILE + k] += av[j] * xv[k];
    }
    // Lane l holds the warp's sum of value l: rank j0 + l / LORA_TILE, token l % LORA_TILE.
    float v = warp_sums<LORA_RANKS * LORA_TILE>(acc, lane);
    part[warp][lane] = v;
    __syncthreads();
    if (threadIdx.x < LORA_RANKS * LORA_TILE) {
        float tot = 0.f;
#pragma unroll
        for (int w = 0; w < LORA_WARPS; w++) tot += part[w][threadIdx.x];
        int j = j0 + threadIdx.x / LORA_TILE, k = threadIdx.x % LORA_TILE;
        if (j < r && k < cnt) u[(long long)tok[k] * uCols + g * maxRank + j] = tot;
    }
}

// lora_expand_f32: out_g[t][o] += sum over j < r of b_g[s*maxRank + j][o] * u[t][g*maxRank
// + j] for each token t of slot s >= 0 (r = ranks[s]) and member g. grid = (tiles, c0 + c1 +
// c2), c_g = ceil(n_g / blockDim.x) column blocks of member g: a thread adds one column for
// every token of its block's tile, the tile's u rows in shared memory (LORA_TILE * maxRank
// floats, dynamic).
extern "C" __global__ void lora_expand_f32(float* o0, float* o1, float* o2, const float* u, const float* b0, const float* b1,
                                           const float* b2, const int* slots, const int* ranks, const int* order,
                                           const int* tiles, int n0, int n1, int n2, int maxRank, int uCols) {
    extern __shared__ float us[];
    pdl_entry();
    int tok[LORA_TILE];
    int cnt = lora_tile(tiles, order, blockIdx.x, tok);
    if (cnt == 0) return;
    int cols = blockDim.x, c0 = (n0 + cols - 1) / cols, c1 = (n1 + cols - 1) / cols;
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
    int s = slots[tok[0]], r = ranks[s];
    for (int v = threadIdx.x; v < LORA_TILE * r; v += blockDim.x) {
        int k = v / r, j = v % r;
        us[k * maxRank + j] = u[(long long)tok[k] * uCols + g * maxRank + j];
    }
    __syncthreads();
    int o = cb * cols + threadIdx.x;
    if (o >= n) return;
    const float* b = lora_pick(g, b0, b1, b2) + (long long)s * maxRank * n + o;
    float acc[LORA_TILE];
#pragma unroll
    for (int k = 0; k < LORA_TILE; k++) acc[k] = 0.f;
    for (int j0 = 0; j0 < r; j0 += 16) {
        // Ranks past r read row r - 1 again with a weight of zero.
        float bv[16];
#pragma unroll
        for (int j = 0; j < 16; j++) bv[j] = b[(long long)min(j0 + j, r - 1) * n];
#pragma unroll
        for (int j = 0; j < 16; j++) {
            int jj = min(j0 + j, r - 1);
            bool live = j0 + j < r;
#pragma unroll
            for (int k = 0; k < LORA_TILE; k++) acc[k] += bv[j] * (live ? us[k * maxRank + jj] : 0.f);
        }
    }
    float* out = g == 0 ? o0 : (g == 1 ? o1 : o2);
#pragma unroll
    for (int k = 0; k < LORA_TILE; k++)
        if (k < cnt) out[(long long)tok[k] * n + o] += acc[k];
}
