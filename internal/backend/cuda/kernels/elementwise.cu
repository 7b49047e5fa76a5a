// Embedding gather, row gather, casts, add and SwiGLU.

// embed: out[row] = table[tokens[row]] as float32; grid = tokens, any block size. Ids
// outside [0, vocab) give a zero row.
template <typename T>
__device__ void embed(float* out, const T* table, const int* tokens, int vocab, int dim) {
    pdl_entry();
    long long row = blockIdx.x;
    int tok = tokens[row];
    float* dst = out + row * dim;
    if (tok < 0 || tok >= vocab) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = 0.f;
        return;
    }
    const T* src = table + (long long)tok * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = to_f32(src[i]);
}
extern "C" __global__ void embed_f32(float* out, const float* t, const int* tok, int vocab, int dim) { embed(out, t, tok, vocab, dim); }
extern "C" __global__ void embed_f16(float* out, const f16* t, const int* tok, int vocab, int dim) { embed(out, t, tok, vocab, dim); }
extern "C" __global__ void embed_bf16(float* out, const bf16* t, const int* tok, int vocab, int dim) { embed(out, t, tok, vocab, dim); }

// gather_rows_f32: out[i] = in[idx[i]], rows of dim floats; grid = rows.
extern "C" __global__ void gather_rows_f32(float* out, const float* in, const int* idx, int dim) {
    pdl_entry();
    long long row = blockIdx.x;
    const float* src = in + (long long)idx[row] * dim;
    float* dst = out + row * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
}

// cast: out = (T)in over n values; grid-stride.
template <typename T>
__device__ void cast_from_f32(T* out, const float* in, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = from_f32<T>(in[i]);
}
extern "C" __global__ void cast_f32_f16(f16* out, const float* in, long long n) { cast_from_f32(out, in, n); }
extern "C" __global__ void cast_f32_bf16(bf16* out, const float* in, long long n) { cast_from_f32(out, in, n); }

// widen: out = (float)in over n 16-bit values; grid-stride.
template <typename T>
__device__ void widen_to_f32(float* out, const T* in, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = to_f32(in[i]);
}
extern "C" __global__ void widen_f16_f32(float* out, const f16* in, long long n) { widen_to_f32(out, in, n); }
extern "C" __global__ void widen_bf16_f32(float* out, const bf16* in, long long n) { widen_to_f32(out, in, n); }

// add_f32: out = a + b over n values; out may alias a or b.
extern "C" __global__ void add_f32(float* out, const float* a, const float* b, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

// swiglu: out[r][c] = silu(gate[r*inStride+c]) * up[r*inStride+c] for rows x dim values;
// out is contiguous [rows][dim]. With a fused gate|up projection, up = gate + dim and
// inStride = 2*dim.
template <typename T>
__device__ void swiglu(T* out, const float* gate, const float* up, int rows, int dim, int inStride) {
    pdl_entry();
    long long n = (long long)rows * dim;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long r = i / dim, c = i - r * dim;
        float g = gate[r * inStride + c], u = up[r * inStride + c];
        out[i] = from_f32<T>(g / (1.f + expf(-g)) * u);
    }
}
extern "C" __global__ void swiglu_f32(float* o, const float* g, const float* u, int rows, int dim, int s) { swiglu(o, g, u, rows, dim, s); }
extern "C" __global__ void swiglu_f16(f16* o, const float* g, const float* u, int rows, int dim, int s) { swiglu(o, g, u, rows, dim, s); }
extern "C" __global__ void swiglu_bf16(bf16* o, const float* g, const float* u, int rows, int dim, int s) { swiglu(o, g, u, rows, dim, s); }

// swiglu_sh: swiglu into float32 out (contiguous input rows, inStride = dim) and the same
// values rounded to S into shadow (the 16-bit copy the down projection's GEMM reads).
template <typename S>
__device__ void swiglu_sh(float* out, S* shadow, const float* gate, const float* up, long long n) {
    pdl_entry();
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float g = gate[i];
        float y = g / (1.f + expf(-g)) * up[i];
        out[i] = y;
        shadow[i] = from_f32<S>(y);
    }
}
extern "C" __global__ void swiglu_sh_bf16(float* o, bf16* s, const float* g, const float* u, long long n) { swiglu_sh(o, s, g, u, n); }
extern "C" __global__ void swiglu_sh_f16(float* o, f16* s, const float* g, const float* u, long long n) { swiglu_sh(o, s, g, u, n); }

// swiglu_x8_f32: swiglu over contiguous float32 values, a unit of 16 a thread, into out
// and the int8 layout's rounding of out (x8 and xd as quantize_x8_rows writes them), so
// that the down projection's quantized GEMV needs no launch to round its input; out may
// be gate or up.
extern "C" __global__ void swiglu_x8_f32(float* out, unsigned char* x8, float* xd, const float* gate, const float* up, long long units) {
    pdl_entry();
    for (long long u = (long long)blockIdx.x * blockDim.x + threadIdx.x; u < units; u += (long long)gridDim.x * blockDim.x) {
        float4 a[4];
#pragma unroll
        for (int c = 0; c < 4; c++) {
            float4 g = ((const float4*)(gate + 16 * u))[c], v = ((const float4*)(up + 16 * u))[c];
            a[c] = make_float4(g.x / (1.f + expf(-g.x)) * v.x, g.y / (1.f + expf(-g.y)) * v.y,
                               g.z / (1.f + expf(-g.z)) * v.z, g.w / (1.f + expf(-g.w)) * v.w);
        }
#pragma unroll
        for (int c = 0; c < 4; c++) ((float4*)(out + 16 * u))[c] = a[c];
        store_x8(a, x8, xd, u);
    }
}

// geglu_f32: out = gelu(gate) * up over n values with the tanh approximation of GELU,
// gelu(g) = g/2 * (1 + tanh(sqrt(2/pi) * (g + 0.044715 g^3))) (Gemma's MLP); out may alias
// gate or up.
extern "C" __global__ void geglu_f32(float* out, const float* gate, const float* up, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float g = gate[i];
        float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
        out[i] = 0.5f * g * (1.f + tanhf(inner)) * up[i];
    }
}

// scale_f32: x *= s over n values.
extern "C" __global__ void scale_f32(float* x, float s, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] *= s;
}
