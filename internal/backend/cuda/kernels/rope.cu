// RoPE fused with the KV-cache write.

// rope_kv: for token t (grid.x = tokens) at position pos[t], block y (grid.y = heads +
// kvHeads) takes one head:
//  - y < heads rotates the first ropeDim values of query head y of q in place (q row t
//    starts at t*qStride, head h at h*headDim);
//  - y = heads + h rotates key head h of k (row t at t*kStride) in place and writes it, with
//    value head h of v (row t at t*vStride), to cache slot slots[t] (the write skipped when
//    < 0: an encoder rotates without a cache; the value's skipped when vcache is kcache, a
//    cache whose values are its keys).
// The cache is [slot][kvHeads][headDim], slot = block*blockSize + offset. Angles are formed
// in float32 as pos * invFreq[i] (one per pair i < ropeDim/2) and cos/sin are scaled by
// mscale. neox pairs (i, i+ropeDim/2); otherwise (2i, 2i+1).
template <typename T>
__device__ void rope_kv(float* q, float* k, const float* v, int qStride, int kStride, int vStride,
                        T* kcache, T* vcache, const int* slots, const int* pos, const float* invFreq,
                        float mscale, int heads, int kvHeads, int headDim, int ropeDim, int neox) {
    pdl_entry();
    long long t = blockIdx.x;
    int hy = blockIdx.y;
    int half = ropeDim / 2;
    float fpos = (float)pos[t];
    long long slot = slots[t];
    bool isQ = hy < heads;
    int h = isQ ? hy : hy - heads;
    // The head's row, rotated in place.
    float* row = isQ ? q + t * qStride + (long long)h * headDim : k + t * kStride + (long long)h * headDim;
    bool store = !isQ && slot >= 0;
    T* kd = kcache + (store ? slot * kvHeads + h : 0) * headDim;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf(fpos * invFreq[i], &s, &c);
        s *= mscale;
        c *= mscale;
        int a = neox ? i : 2 * i;
        int b = neox ? i + half : 2 * i + 1;
        float x = row[a], y = row[b];
        float ra = x * c - y * s, rb = x * s + y * c;
        row[a] = ra;
        row[b] = rb;
        if (store) {
            kd[a] = from_f32<T>(ra);
            kd[b] = from_f32<T>(rb);
        }
    }
    if (!store) return;
    const float* src = row;
    const float* vs = v + t * vStride + (long long)h * headDim;
    T* vd = vcache + (slot * kvHeads + h) * headDim;
    bool values = vcache != kcache;  // a cache whose values are its keys holds the keys alone
    for (int d = threadIdx.x; d < headDim; d += blockDim.x) {
        if (d >= ropeDim) kd[d] = from_f32<T>(src[d]);
        if (values) vd[d] = from_f32<T>(vs[d]);
    }
}
#define ROPE_KV(NAME, T)                                                                              \
    extern "C" __global__ void NAME(float* q, float* k, const float* v, int qs, int ks, int vs,        \
                                    T* kc, T* vc, const int* slots, const int* pos, const float* inv, \
                                    float msc, int heads, int kvh, int hd, int rd, int neox) {         \
        rope_kv(q, k, v, qs, ks, vs, kc, vc, slots, pos, inv, msc, heads, kvh, hd, rd, neox);          \
    }
ROPE_KV(rope_kv_f32, float)
ROPE_KV(rope_kv_f16, f16)
ROPE_KV(rope_kv_bf16, bf16)
