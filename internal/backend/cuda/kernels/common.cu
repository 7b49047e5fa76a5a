// Shared helpers of kvasir's CUDA kernels. Each kernel file is compiled as its own NVRTC
// program with this file in front, so a helper that two files use belongs here. No CUDA
// headers are included, so 16-bit floats are converted by hand (bf16) and through PTX (f16).

#define KV_INF __int_as_float(0x7f800000)

// bf16 and f16 hold raw 16-bit patterns; distinct structs let overloads tell them apart.
struct bf16 { unsigned short x; };
struct f16 { unsigned short x; };

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __uint_as_float(((unsigned int)v.x) << 16); }
__device__ __forceinline__ float to_f32(f16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x));
    return f;
}

// dp4a returns c plus the dot product of the four signed bytes of a and of b (PTX dp4a,
// sm_61 and later). Written in PTX so that NVRTC versions without the __dp4a builtin compile it.
__device__ __forceinline__ int dp4a(int a, int b, int c) {
    int d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float v) {
    unsigned int u = __float_as_uint(v);
    bf16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a quiet NaN
        r.x = (unsigned short)((u >> 16) | 0x40u);
        return r;
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    r.x = (unsigned short)(u >> 16);
    return r;
}
template <> __device__ __forceinline__ f16 from_f32<f16>(float v) {
    f16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(v));
    return r;
}

// Programmatic dependent launch (Hopper and later). A kernel the host launches with the
// programmatic-serialization attribute (pdlKernel in launch.go) may start before the
// kernel ahead of it in the stream has finished: it must call pdl_wait before it reads
// anything an earlier kernel wrote (and before any early return, so that its own
// completion still implies its predecessors'). pdl_launch lets the next kernel start
// early. On older GPUs both do nothing.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// pdl_entry is the first statement of a kernel launched as a dependent that needs its
// inputs from the start.
__device__ __forceinline__ void pdl_entry() {
    pdl_wait();
    pdl_launch();
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// block_sum returns the sum of v over the block to every thread. blockDim.x is a multiple
// of 32; sh holds 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.f;
    return warp_sum(v);
}

// block_max is block_sum's twin for the maximum.
__device__ __forceinline__ float block_max(float v, float* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -KV_INF;
    return warp_max(v);
}

// ReduceScatter<C>::run sums C values per lane (v[0..C)) over the lanes that differ in bit
// o, o/2, ... of their lane number (log2 C bits), halving the values each time: a lane keeps
// the half its bit selects and adds the other lane's copy of it. Each value is summed in
// the order warp_sum sums it, stage by stage, so the sums are warp_sum's bit for bit, for
// C - 1 shuffles instead of 5 C.
template <int C>
struct ReduceScatter {
    __device__ static __forceinline__ void run(float* v, int lane, int o) {
        bool up = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < C / 2; i++) {
            float send = up ? v[i] : v[i + C / 2];
            float keep = up ? v[i + C / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
        ReduceScatter<C / 2>::run(v, lane, o >> 1);
    }
};
template <>
struct ReduceScatter<1> {
    __device__ static __forceinline__ void run(float*, int, int) {}
};

// warp_sums sums each of V values (a power of two up to 32) over the warp, as warp_sum
// would one by one: lane l returns the sum of value l / (32 / V).
template <int V>
__device__ __forceinline__ float warp_sums(float* v, int lane) {
    static_assert(V >= 1 && V <= 32 && (V & (V - 1)) == 0, "V must be a power of two up to 32");
    ReduceScatter<V>::run(v, lane, 16);
    float s = v[0];
#pragma unroll
    for (int o = 16 / V; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}
