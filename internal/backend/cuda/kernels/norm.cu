// RMSNorm fused with the residual add.

#define RMS_MAXV 8  // values per thread kept in registers

// rmsnorm: per row (grid = rows), when x is not null residual += x first; then
// out = residual / sqrt(mean(residual^2) + eps) * weight, and when shadow is not null the
// same values rounded to S there too (the 16-bit copy the next cuBLAS GEMM reads). out may be residual (float32)
// when x is null. When a row fits in the block's registers (dim <= RMS_MAXV * blockDim.x,
// the launch sizes the block so), every load is issued at once and each value is read
// once; longer rows take the looping path.
template <typename T, typename S>
__device__ void rmsnorm(T* out, S* shadow, float* residual, const float* x, const float* weight, int dim, float eps) {
    pdl_entry();
    __shared__ float sh[32];
    long long row = blockIdx.x;
    float* r = residual + row * dim;
    const float* xr = x ? x + row * dim : 0;
    T* o = out + row * dim;
    S* so = shadow ? shadow + row * dim : 0;
    if (dim <= RMS_MAXV * (int)blockDim.x) {
        float v[RMS_MAXV], wv[RMS_MAXV];
#pragma unroll
        for (int j = 0; j < RMS_MAXV; j++) {
            int i = threadIdx.x + j * blockDim.x;
            v[j] = 0.f;
            wv[j] = 0.f;
            if (i < dim) {
                v[j] = r[i];
                wv[j] = weight[i];
                if (xr) v[j] += xr[i];
            }
        }
        float ss = 0.f;
#pragma unroll
        for (int j = 0; j < RMS_MAXV; j++) {
            int i = threadIdx.x + j * blockDim.x;
            if (xr && i < dim) r[i] = v[j];
            ss += v[j] * v[j];
        }
        ss = block_sum(ss, sh);
        float inv = 1.f / sqrtf(ss / (float)dim + eps);
#pragma unroll
        for (int j = 0; j < RMS_MAXV; j++) {
            int i = threadIdx.x + j * blockDim.x;
            if (i < dim) {
                float y = v[j] * inv * wv[j];
                o[i] = from_f32<T>(y);
                if (so) so[i] = from_f32<S>(y);
            }
        }
        return;
    }
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
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float y = r[i] * inv * weight[i];
        o[i] = from_f32<T>(y);
        if (so) so[i] = from_f32<S>(y);
    }
}
extern "C" __global__ void rmsnorm_f32(float* o, float* r, const float* x, const float* w, int dim, float eps) { rmsnorm(o, (bf16*)0, r, x, w, dim, eps); }
extern "C" __global__ void rmsnorm_f16(f16* o, float* r, const float* x, const float* w, int dim, float eps) { rmsnorm(o, (bf16*)0, r, x, w, dim, eps); }
extern "C" __global__ void rmsnorm_bf16(bf16* o, float* r, const float* x, const float* w, int dim, float eps) { rmsnorm(o, (bf16*)0, r, x, w, dim, eps); }
// rmsnorm_f32_sh_*: float32 out plus its 16-bit shadow copy.
extern "C" __global__ void rmsnorm_f32_sh_bf16(float* o, bf16* s, float* r, const float* x, const float* w, int dim, float eps) { rmsnorm(o, s, r, x, w, dim, eps); }
extern "C" __global__ void rmsnorm_f32_sh_f16(float* o, f16* s, float* r, const float* x, const float* w, int dim, float eps) { rmsnorm(o, s, r, x, w, dim, eps); }

// rmsnorm_f32_x8: float32 out plus the int8 layout's rounding of it (x8: [rows][dim]
// bytes, xd: [rows][dim/16] scales; dim a multiple of 16), what quantize_x8_rows would
// write from out, so that the quantized GEMV that reads out needs no launch of its own to
// round it. The block's threads read back the row the block wrote (plain loads, after the
// barrier that makes the block's writes visible to it).
extern "C" __global__ void rmsnorm_f32_x8(float* o, unsigned char* x8, float* xd, float* r, const float* x, const float* w, int dim, float eps) {
    rmsnorm(o, (bf16*)0, r, x, w, dim, eps);
    __syncthreads();
    long long row = blockIdx.x, units = dim / 16;
    const float4* orow = (const float4*)(o + row * dim);
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
        float4 a[4];
#pragma unroll
        for (int c = 0; c < 4; c++) a[c] = orow[4 * u + c];
        store_x8(a, x8, xd, row * units + u);
    }
}

// sumsq_f32: out[row] = the sum of the squares of x's row of dim values; grid = rows,
// block a multiple of 32. The first half of an RMSNorm whose rows are split across
// tensor-parallel ranks (rmsnorm_split_f32 is the second, after an all-reduce of out).
extern "C" __global__ void sumsq_f32(float* out, const float* x, int dim) {
    __shared__ float sh[32];
    long long row = blockIdx.x;
    const float* xr = x + row * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, sh);
    if (threadIdx.x == 0) out[row] = ss;
}

// rmsnorm_split_f32: x[row] = x[row] / sqrt(ss[row] / n + eps) * weight in place, rows of
// dim values whose whole rows (all ranks') hold n; grid = rows.
extern "C" __global__ void rmsnorm_split_f32(float* x, const float* ss, const float* weight, int dim, int n, float eps) {
    long long row = blockIdx.x;
    float inv = rsqrtf(ss[row] / (float)n + eps);
    float* xr = x + row * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) xr[i] = xr[i] * inv * weight[i];
}
