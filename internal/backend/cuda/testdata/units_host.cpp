// units_host.cpp: the host half of TestUnitsOnHost. kernels/gemvq.cuh's unit decoders,
// compiled with the host C++ compiler against plain loads (the test puts this file after
// scripts/cuda_host_stubs.h, common.cu and gemvq.cuh), decode every 16-value unit of rows
// of one block type: units_host TYPE FILE ROWS K writes ROWS*K float32 values to stdout.
extern "C" int printf(const char*, ...);
extern "C" int strcmp(const char*, const char*);
extern "C" void* fopen(const char*, const char*);
extern "C" unsigned long fread(void*, unsigned long, unsigned long, void*);
extern "C" unsigned long fwrite(const void*, unsigned long, unsigned long, void*);
extern "C" void* fdopen(int, const char*);
extern "C" int fflush(void*);
extern "C" long atol(const char*);
extern "C" void* malloc(unsigned long);

template <typename Q>
static int run(const char* path, long rows, long k) {
    long rowBytes = k / Q::ELEMS * Q::BYTES;
    unsigned char* w = (unsigned char*)malloc(rows * rowBytes);
    void* f = fopen(path, "rb");
    if (!f || (long)fread(w, 1, rows * rowBytes, f) != rows * rowBytes) return 2;
    void* out = fdopen(1, "wb");
    for (long r = 0; r < rows; r++)
        for (int u = 0; u < k / 16; u++) {
            float v[16];
            unit_values<Q>(w + r * rowBytes, u, v);
            fwrite(v, 4, 16, out);
        }
    fflush(out);
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 5) return 2;
    const char* t = argv[1];
    long rows = atol(argv[3]), k = atol(argv[4]);
#define TYPE(Q) \
    if (!strcmp(t, #Q)) return run<Q>(argv[2], rows, k);
    TYPE(q8_0) TYPE(q4_0) TYPE(q4_1) TYPE(q5_0) TYPE(q5_1) TYPE(q4_k) TYPE(q5_k) TYPE(q6_k) TYPE(q2_k) TYPE(q3_k)
    TYPE(q8_0r) TYPE(q6_kr)
    return 3;
}
