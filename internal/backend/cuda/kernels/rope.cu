// RoPE fused with the KV-cache write.

// rope_kv: for token t (grid = tokens) at position pos[t]:
//  - rotates the first ropeDim values of each of the heads query vectors of q in place
//    (q row t starts at t*qStride, head h at h*headDim);
//  - rotates the kvHeads key vectors of k (row t at t*kStride) and writes them, with the
//    value vectors of v (row t at t*vStride), to cache slot slots[t] (skipped when < 0).
// The cache is [slot][kvHeads][headDim], slot = block*blockSize + offset. Angles are formed
// in float32 as pos * invFreq[i] (one per pair i < ropeDim/2) and cos/sin are scaled by
// mscale. neox pairs (i, i+ropeDim/2); otherwise (2i, 2i+1).
template <typename T>
__device__ void rope_kv(float* q, const float* k, const float* v, int qStride, int kStride, int vStride,
                        T* kcache, T* vcache, const int* slots, const int* pos, const float* invFreq,
                        float mscale, int heads, int kvHeads, int headDim, int ropeDim, int neox) {
    long long t = blockIdx.x;
    int half = ropeDim / 2;
    float fpos = (float)pos[t];
    long long slot = slots[t];
    float* qt = q + t * qStride;
    const float* kt = k + t * kStride;
    const float* vt = v + t * vStride;
    int qPairs = heads * half;
    int kPairs = kvHeads * half;
    for (int p = threadIdx.x; p < qPairs + kPairs; p += blockDim.x) {
        bool isQ = p < qPairs;
        int pp = isQ ? p : p - qPairs;
        int h = pp / half, i = pp - h * half;
        float s, c;
        sincosf(fpos * invFreq[i], &s, &c);
        s *= mscale;
        c *= mscale;
        int a = neox ? i : 2 * i;
        int b = neox ? i + half : 2 * i + 1;
        if (isQ) {
            float* vq = qt + h * headDim;
            float x = vq[a], y = vq[b];
            vq[a] = x * c - y * s;
            vq[b] = x * s + y * c;
        } else if (slot >= 0) {
            const float* vk = kt + h * headDim;
            float x = vk[a], y = vk[b];
            T* dst = kcache + (slot * kvHeads + h) * headDim;
            dst[a] = from_f32<T>(x * c - y * s);
            dst[b] = from_f32<T>(x * s + y * c);
        }
    }
    if (slot < 0) return;
    int kvDim = kvHeads * headDim;
    T* kd = kcache + slot * kvDim;
    T* vd = vcache + slot * kvDim;
    for (int e = threadIdx.x; e < kvDim; e += blockDim.x) {
        int h = e / headDim, d = e - h * headDim;
        if (d >= ropeDim) kd[e] = from_f32<T>(kt[h * headDim + d]);
        vd[e] = from_f32<T>(vt[h * headDim + d]);
    }
}
#define ROPE_KV(NAME, T)                                                                              \
    extern "C" __global__ void NAME(float* q, const float* k, const float* v, int qs, int ks, int vs,  \
                                    T* kc, T* vc, const int* slots, const int* pos, const float* inv, \
                                    float msc, int heads, int kvh, int hd, int rd, int neox) {         \
        rope_kv(q, k, v, qs, ks, vs, kc, vc, slots, pos, inv, msc, heads, kvh, hd, rd, neox);          \
    }
ROPE_KV(rope_kv_f32, float)
ROPE_KV(rope_kv_f16, f16)
ROPE_KV(rope_kv_bf16, bf16)
