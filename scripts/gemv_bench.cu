// Times variants of kvasir's GEMV kernels (internal/backend/cuda/kernels/gemv.cu) on the
// decode shapes of llama-3.1-8b (BF16) for 1 and 5 token rows (a decode step and a 1+4
// speculative verify step), and checks that each variant's sums are bit-identical to the
// production kernel's (the verify step must reproduce decode's logits exactly).
// Build and run on a GPU machine (sm_90):
//   nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/gemv_bench scripts/gemv_bench.cu && /tmp/gemv_bench
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "../internal/backend/cuda/kernels/common.cu"
#include "../internal/backend/cuda/kernels/gemv.cu"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

template <int R, int NT, bool NOL1>
__global__ void __launch_bounds__(GEMV_THREADS) v_gemv(float* y, const float* x, const bf16* w, int n, int k, int m) {
    gemv_rows<bf16, R, NT, NOL1, false>(blockIdx.x, y, x, w, w, n, k, m);
}
template <int R, int NT, bool NOL1>
__global__ void __launch_bounds__(GEMV_THREADS) v_glu(float* y, const float* x, const bf16* g, const bf16* u, int n, int k, int m) {
    gemv_rows<bf16, R, NT, NOL1, true>(blockIdx.x, y, x, g, u, n, k, m);
}

struct Shape { const char* name; int m, k; bool glu; };

static float run_ms(void (*launch)(float*, const float*, const bf16*, const bf16*, int, int, int, int), float* y,
                    const float* x, const bf16* const* ws, const bf16* const* us, int sets, int n, int k, int m) {
    cudaEvent_t a, b;
    cudaEventCreate(&a); cudaEventCreate(&b);
    for (int i = 0; i < 3; i++) launch(y, x, ws[i % sets], us[i % sets], n, k, m, 0);
    const int reps = 60;
    std::vector<float> t;
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(a);
        launch(y, x, ws[i % sets], us[i % sets], n, k, m, 0);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[reps / 2];
}

template <int R, int NT, bool NOL1>
void L_gemv(float* y, const float* x, const bf16* w, const bf16*, int n, int k, int m, int) {
    v_gemv<R, NT, NOL1><<<(m + R - 1) / R, GEMV_THREADS>>>(y, x, w, n, k, m);
}
template <int R, int NT, bool NOL1>
void L_glu(float* y, const float* x, const bf16* g, const bf16* u, int n, int k, int m, int) {
    v_glu<R, NT, NOL1><<<(m + R - 1) / R, GEMV_THREADS>>>(y, x, g, u, n, k, m);
}

int main() {
    Shape shapes[] = {{"qkv 6144x4096", 6144, 4096, false}, {"o 4096x4096", 4096, 4096, false},
                      {"gate+up 2x14336x4096", 14336, 4096, true}, {"down 4096x14336", 4096, 14336, false},
                      {"lm_head 128256x4096", 128256, 4096, false}};
    const int sets = 4;  // rotate weights so they do not sit in L2
    for (auto& s : shapes) {
        size_t wn = (size_t)s.m * s.k;
        std::vector<unsigned short> hw(wn);
        const bf16 *ws[sets], *us[sets];
        for (int i = 0; i < sets; i++) {
            for (size_t j = 0; j < wn; j++) hw[j] = (unsigned short)(0x3c00 + (rand() & 0x3ff)) ^ ((rand() & 1) << 15);
            bf16 *d, *d2; CK(cudaMalloc(&d, wn * 2)); CK(cudaMemcpy(d, hw.data(), wn * 2, cudaMemcpyHostToDevice));
            CK(cudaMalloc(&d2, wn * 2)); CK(cudaMemcpy(d2, hw.data(), wn * 2, cudaMemcpyHostToDevice));
            ws[i] = d; us[i] = d2;
        }
        std::vector<float> hx(8 * s.k);
        for (auto& v : hx) v = (rand() / (float)RAND_MAX) - 0.5f;
        float *x, *y, *yref; CK(cudaMalloc(&x, hx.size() * 4)); CK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&y, 8 * (size_t)s.m * 4)); CK(cudaMalloc(&yref, 8 * (size_t)s.m * 4));
        double bytes = (s.glu ? 2.0 : 1.0) * wn * 2;
        struct V { const char* name; int n; void (*l)(float*, const float*, const bf16*, const bf16*, int, int, int, int); };
        std::vector<V> vs;
        if (!s.glu) {
            vs = {{"n1 R8 (prod)", 1, L_gemv<8, 1, false>}, {"n1 R4", 1, L_gemv<4, 1, false>}, {"n1 R16", 1, L_gemv<16, 1, false>},
                  {"n5 NT8 R4 nol1 (prod)", 5, L_gemv<4, 8, true>}, {"n5 NT8 R2 nol1", 5, L_gemv<2, 8, true>},
                  {"n5 NT8 R1 nol1", 5, L_gemv<1, 8, true>}, {"n5 NT8 R4 l1", 5, L_gemv<4, 8, false>},
                  {"n5 NT8 R2 l1", 5, L_gemv<2, 8, false>},
                  {"n4 NT4 R4 (prod)", 4, L_gemv<4, 4, true>}, {"n4 NT4 R8", 4, L_gemv<8, 4, true>},
                  {"n2 NT2 R4 (prod)", 2, L_gemv<4, 2, true>}, {"n2 NT2 R8", 2, L_gemv<8, 2, true>}};
        } else {
            vs = {{"n1 R1 (prod)", 1, L_glu<1, 1, false>}, {"n1 R2", 1, L_glu<2, 1, false>}, {"n1 R4", 1, L_glu<4, 1, false>},
                  {"n5 NT8 R2 nol1 (prod)", 5, L_glu<2, 8, true>}, {"n5 NT8 R1 nol1", 5, L_glu<1, 8, true>},
                  {"n5 NT8 R2 l1", 5, L_glu<2, 8, false>}, {"n5 NT8 R1 l1", 5, L_glu<1, 8, false>},
                  {"n4 NT4 R2 (prod)", 4, L_glu<2, 4, true>}, {"n4 NT4 R4", 4, L_glu<4, 4, true>},
                  {"n2 NT2 R2 (prod)", 2, L_glu<2, 2, true>}, {"n2 NT2 R4", 2, L_glu<4, 2, true>}};
        }
        // reference: the production n1 kernel row by row
        std::vector<float> ref(5 * (size_t)s.m), got(5 * (size_t)s.m);
        for (int t = 0; t < 5; t++) {
            if (s.glu) L_glu<1, 1, false>(yref + (size_t)t * s.m, x + (size_t)t * s.k, ws[0], us[0], 1, s.k, s.m, 0);
            else L_gemv<8, 1, false>(yref + (size_t)t * s.m, x + (size_t)t * s.k, ws[0], us[0], 1, s.k, s.m, 0);
        }
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(ref.data(), yref, ref.size() * 4, cudaMemcpyDeviceToHost));
        float base = 0;
        for (auto& v : vs) {
            CK(cudaMemset(y, 0xff, 8 * (size_t)s.m * 4));
            v.l(y, x, ws[0], us[0], v.n, s.k, s.m, 0);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(got.data(), y, (size_t)v.n * s.m * 4, cudaMemcpyDeviceToHost));
            bool exact = memcmp(got.data(), ref.data(), (size_t)v.n * s.m * 4) == 0;
            float ms = run_ms(v.l, y, x, ws, us, sets, v.n, s.k, s.m);
            if (base == 0) base = ms;
            printf("GEMV|%s|%s|%.1f us|%.0f GB/s|x%.2f of n1|%s\n", s.name, v.name, ms * 1e3, bytes / (ms * 1e-3) / 1e9,
                   ms / base, exact ? "exact" : "DIFFERS");
        }
        for (int i = 0; i < sets; i++) { cudaFree((void*)ws[i]); cudaFree((void*)us[i]); }
        cudaFree(x); cudaFree(y); cudaFree(yref);
    }
    // copy bandwidth probe
    size_t nb = 1ull << 31; void *a, *b; CK(cudaMalloc(&a, nb)); CK(cudaMalloc(&b, nb));
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaMemcpy(b, a, nb, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0); for (int i = 0; i < 5; i++) cudaMemcpy(b, a, nb, cudaMemcpyDeviceToDevice); cudaEventRecord(e1);
    cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1);
    printf("COPY|%.0f GB/s (read+write)\n", 2.0 * nb * 5 / (ms * 1e-3) / 1e9);
    return 0;
}
