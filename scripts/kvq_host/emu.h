// Host emulation of the CUDA built-ins the kvq kernels use: each block runs as blockDim.x
// OS threads with a barrier for __syncthreads and per-warp exchanges for shuffles.
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <thread>
#include <barrier>
#include <functional>
#include <algorithm>
#include <memory>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
#define __restrict__
#define __align__(x) __attribute__((aligned(x)))
#define __CUDA_ARCH__ 900
#define asm_(...) ((void)0)
struct uint4 { unsigned int x, y, z, w; };
struct uint2 { unsigned int x, y; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct dim3 { unsigned int x, y, z; };
thread_local dim3 threadIdx;
dim3 blockIdx, blockDim, gridDim;
static std::barrier<>* g_block;
static std::barrier<>* g_warp[32];
static float g_xf[32][32];
static int g_xi[32][32];
inline void __syncthreads() { g_block->arrive_and_wait(); }
inline void __syncwarp() { g_warp[threadIdx.x >> 5]->arrive_and_wait(); }
inline void __threadfence() {}
inline float __shfl_xor_sync(unsigned, float v, int o) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_xf[w][l] = v; g_warp[w]->arrive_and_wait();
    float r = g_xf[w][l ^ o]; g_warp[w]->arrive_and_wait();
    return r;
}
inline int __shfl_xor_sync(unsigned, int v, int o) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_xi[w][l] = v; g_warp[w]->arrive_and_wait();
    int r = g_xi[w][l ^ o]; g_warp[w]->arrive_and_wait();
    return r;
}
inline float __shfl_sync(unsigned, float v, int src) {
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    g_xf[w][l] = v; g_warp[w]->arrive_and_wait();
    float r = g_xf[w][src & 31]; g_warp[w]->arrive_and_wait();
    return r;
}
template <typename T> T __ldg(const T* p) { return *p; }
template <typename T> T __ldcg(const T* p) { return *p; }
inline unsigned __float_as_uint(float f){unsigned u;memcpy(&u,&f,4);return u;}
inline int __float_as_int(float f){int u;memcpy(&u,&f,4);return u;}
inline float __int_as_float(int u){float f;memcpy(&f,&u,4);return f;}
inline float __uint_as_float(unsigned u){float f;memcpy(&f,&u,4);return f;}
inline int __float2int_rn(float x){float r=nearbyintf(x); if(r>=2147483648.f) return 2147483647; if(r<-2147483648.f) return (-2147483647-1); return (int)r;}
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s){ unsigned char p[8]; for(int i=0;i<4;i++){p[i]=(x>>(8*i))&0xff; p[4+i]=(y>>(8*i))&0xff;} unsigned r=0; for(int n=0;n<4;n++){ r|=(unsigned)p[(s>>(4*n))&7]<<(8*n);} return r; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline int atomicAdd(int* p, int v) { int o = *p; *p += v; return o; }
inline int atomicMax(int* p, int v) { int o = *p; *p = std::max(o, v); return o; }
inline int __dp4a(int, int, int) { return 0; }
inline unsigned __vsub4(unsigned, unsigned) { return 0; }
// launch runs fn over the grid, a block at a time.
inline void launch(dim3 grid, int threads, std::function<void()> fn) {
    gridDim = grid; blockDim = {(unsigned)threads, 1, 1};
    for (unsigned z = 0; z < grid.z; z++) for (unsigned y = 0; y < grid.y; y++) for (unsigned x = 0; x < grid.x; x++) {
        blockIdx = {x, y, z};
        std::barrier<> bb(threads); g_block = &bb;
        std::vector<std::unique_ptr<std::barrier<>>> wb;
        for (int w = 0; w < threads / 32; w++) { wb.emplace_back(new std::barrier<>(32)); g_warp[w] = wb.back().get(); }
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; t++) ts.emplace_back([t, &fn] { threadIdx = {(unsigned)t, 0, 0}; fn(); });
        for (auto& th : ts) th.join();
    }
}
