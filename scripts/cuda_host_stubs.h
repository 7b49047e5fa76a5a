// Host stand-ins for the CUDA built-ins kvasir's kernels use, so that a plain C++ compiler
// can parse and type-check them (scripts/check_kernels.sh) on a machine with no CUDA
// toolkit: the kernels are compiled by NVRTC only at run time, on the GPU machine. Nothing
// here runs; the declarations only give every built-in a plausible signature.
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__
#define __restrict__
#define __align__(x) alignas(x)
#define __CUDA_ARCH__ 900
#define asm_(...) ((void)0)

struct uint4 { unsigned int x, y, z, w; };
struct uint2 { unsigned int x, y; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
struct dim3 { unsigned int x, y, z; };
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

template <typename T> T __ldg(const T* p);
template <typename T> T __ldcg(const T* p);
float __shfl_xor_sync(unsigned, float, int);
int __shfl_xor_sync(unsigned, int, int);
double __shfl_xor_sync(unsigned, double, int);
double __shfl_sync(unsigned, double, int);
float __shfl_sync(unsigned, float, int);
int __shfl_sync(unsigned, int, int);
float __shfl_up_sync(unsigned, float, int);
int __shfl_up_sync(unsigned, int, int);
void __syncthreads();
void __syncwarp();
void __threadfence();
float __int_as_float(int);
float __uint_as_float(unsigned);
unsigned __byte_perm(unsigned, unsigned, unsigned);
int __float2int_rn(float);
uint4 make_uint4(unsigned, unsigned, unsigned, unsigned);
float4 make_float4(float, float, float, float);
int __dp4a(int, int, int);
unsigned __vsub4(unsigned, unsigned);
unsigned __float_as_uint(float);
int __float_as_int(float);
float expf(float);
double exp(double);
double fmax(double, double);
double __longlong_as_double(long long);
float tanhf(float);
float exp2f(float);
float logf(float);
float sqrtf(float);
float rsqrtf(float);
float erff(float);
float fabsf(float);
float fmaxf(float, float);
float fminf(float, float);
void sincosf(float, float*, float*);
int min(int, int);
int max(int, int);
unsigned min(unsigned, unsigned);
unsigned max(unsigned, unsigned);
long long min(long long, long long);
long long max(long long, long long);
int atomicAdd(int*, int);
unsigned atomicAdd(unsigned*, unsigned);
float atomicAdd(float*, float);
int atomicMax(int*, int);
unsigned atomicMax(unsigned*, unsigned);
int atomicMin(int*, int);
unsigned atomicMin(unsigned*, unsigned);
