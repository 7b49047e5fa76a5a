// The kernels of bidirectional encoders (BERT, nomic-bert, jina-bert-v2): LayerNorm with
// bias, exact GELU and its gated form, attention of each token over its whole sequence
// (with ALiBi's bias for jina), and pooling a sequence's rows.

// layernorm_f32: per row (grid = rows), y = x + add (add may be null), then
// out = (y - mean) / sqrt(var + eps) * weight + bias, var the mean squared deviation.
// out may alias x or add: every thread reads and writes only its own elements, and the
// writes come after the last block-wide reduction.
extern "C" __global__ void layernorm_f32(float* out, const float* x, const float* add, const float* weight, const float* bias, int dim, float eps) {
    __shared__ float sh[32];
    long long row = blockIdx.x;
    const float* xr = x + row * dim;
    const float* ar = add ? add + row * dim : 0;
    float* o = out + row * dim;
    float s = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i] + (ar ? ar[i] : 0.f);
    float mean = block_sum(s, sh) / (float)dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float d = xr[i] + (ar ? ar[i] : 0.f) - mean;
        ss += d * d;
    }
    float inv = rsqrtf(block_sum(ss, sh) / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float y = xr[i] + (ar ? ar[i] : 0.f);
        o[i] = (y - mean) * inv * weight[i] + bias[i];
    }
}

// gelu_f32: out = x * Phi(x) = x/2 * (1 + erf(x/sqrt 2)) over n values; grid-stride;
// out may alias x.
extern "C" __global__ void gelu_f32(float* out, const float* x, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        out[i] = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    }
}

// gelu_glu_f32: out = gate * Phi(gate) * up (the erf form of GELU) over n values;
// grid-stride; out may alias gate or up.
extern "C" __global__ void gelu_glu_f32(float* out, const float* gate, const float* up, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float g = gate[i];
        out[i] = 0.5f * g * (1.f + erff(g * 0.70710678118654752f)) * up[i];
    }
}

// alibi_slope: head h's ALiBi slope for heads heads and maximum bias maxBias (see
// backend.ALiBiSlopes): with n the largest power of two not above heads, m0^(h+1) for
// h < n, else m1^(2(h-n)+1), m0 = 2^(-maxBias/n), m1 = 2^(-maxBias/2n), taken as one
// power of two each.
__device__ float alibi_slope(int h, int heads, float maxBias) {
    int n = 1;
    while (n * 2 <= heads) n *= 2;
    if (h < n) return exp2f(-maxBias / (float)n * (float)(h + 1));
    return exp2f(-maxBias / 2.f / (float)n * (float)(2 * (h - n) + 1));
}

// bidir_attn_f32: grid (tokens, heads); the block computes token t's head h over every
// token of t's sequence (queryStarts has seqs+1 entries; t's sequence is found by binary
// search). The scores live in dynamic shared memory (one float per key of the longest
// sequence): the block computes them, takes their softmax, then each thread sums the
// weighted values of its output dimensions. q, k, v and out are [tokens][heads*headDim].
// maxBias > 0 subtracts ALiBi's slope * |i - j| from each scaled score (0: no bias).
extern "C" __global__ void bidir_attn_f32(float* out, const float* q, const float* k, const float* v, const int* queryStarts,
                                          int seqs, int heads, int headDim, float scale, float maxBias) {
    extern __shared__ float scores[];
    __shared__ float sh[32];
    int t = blockIdx.x, h = blockIdx.y, width = heads * headDim;
    int a = 0, b = seqs;  // the sequence s with queryStarts[s] <= t < queryStarts[s+1]
    while (b - a > 1) {
        int m = (a + b) / 2;
        if (queryStarts[m] <= t) a = m; else b = m;
    }
    int lo = queryStarts[a], n = queryStarts[a + 1] - lo;
    const float* qt = q + (long long)t * width + h * headDim;
    float slope = maxBias > 0.f ? alibi_slope(h, heads, maxBias) : 0.f;
    float best = -KV_INF;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const float* kj = k + (long long)(lo + j) * width + h * headDim;
        float s = 0.f;
        for (int e = 0; e < headDim; e++) s += qt[e] * kj[e];
        s = s * scale - slope * fabsf((float)(t - lo - j));
        scores[j] = s;
        best = fmaxf(best, s);
    }
    best = block_max(best, sh);
    float z = 0.f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float e = expf(scores[j] - best);
        scores[j] = e;
        z += e;
    }
    z = block_sum(z, sh);  // its __syncthreads also makes every score visible
    float inv = 1.f / z;
    float* ot = out + (long long)t * width + h * headDim;
    for (int e = threadIdx.x; e < headDim; e += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < n; j++) acc += scores[j] * v[(long long)(lo + j) * width + h * headDim + e];
        ot[e] = acc * inv;
    }
}

// pool_rows_f32: grid = sequences; out[s] is the mean of the rows [queryStarts[s],
// queryStarts[s+1]) of x (mode 0), the first of them (1) or the last (2).
extern "C" __global__ void pool_rows_f32(float* out, const float* x, const int* queryStarts, int dim, int mode) {
    int s = blockIdx.x, lo = queryStarts[s], hi = queryStarts[s + 1];
    float* o = out + (long long)s * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        if (mode == 1) {
            o[i] = x[(long long)lo * dim + i];
        } else if (mode == 2) {
            o[i] = x[(long long)(hi - 1) * dim + i];
        } else {
            float acc = 0.f;
            for (int r = lo; r < hi; r++) acc += x[(long long)r * dim + i];
            o[i] = acc / (float)(hi - lo);
        }
    }
}
