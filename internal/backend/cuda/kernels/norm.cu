// RMSNorm fused with the residual add.

// rmsnorm: per row (grid = rows), when x is not null residual += x first; then
// out = residual / sqrt(mean(residual^2) + eps) * weight. out may be residual (float32)
// when x is null.
template <typename T>
__device__ void rmsnorm(T* out, float* residual, const float* x, const float* weight, int dim, float eps) {
    __shared__ float sh[32];
    long long row = blockIdx.x;
    float* r = residual + row * dim;
    const float* xr = x ? x + row * dim : 0;
    T* o = out + row * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = r[i];
        if (xr) {
            v += xr[i];
            r[i] = v;
        }
        ss += v * v;
    }
    ss = block_sum(ss, sh);
    float inv = 1.f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = from_f32<T>(r[i] * inv * weight[i]);
}
extern "C" __global__ void rmsnorm_f32(float* o, float* r, const float* x, const float* w, int dim, float eps) { rmsnorm(o, r, x, w, dim, eps); }
extern "C" __global__ void rmsnorm_f16(f16* o, float* r, const float* x, const float* w, int dim, float eps) { rmsnorm(o, r, x, w, dim, eps); }
extern "C" __global__ void rmsnorm_bf16(bf16* o, float* r, const float* x, const float* w, int dim, float eps) { rmsnorm(o, r, x, w, dim, eps); }
