// Package cuda is kvasir's NVIDIA GPU backend, reached from pure Go (no cgo) through
// github.com/ebitengine/purego:
//
//   - Driver (driver.go) binds the CUDA driver API from libcuda.so.1; Open fails with a
//     clear error when the library is absent and never panics.
//   - Device (device.go) is one GPU owned by a goroutine locked to its OS thread with the
//     primary context current; every CUDA call runs there through Device.Do.
//   - NVRTC (nvrtc.go) compiles the CUDA C kernels embedded from kernels/*.cu for the
//     device's compute capability, caching cubins on disk by source hash.
//   - CuBLAS/BLAS (cublas.go) run the large GEMMs (BF16/F16/F32 inputs, float32 compute).
//   - Ops (ops.go, attention.go) launch the kernels: embedding gather, RMSNorm fused with
//     the residual add, RoPE fused with the paged KV write, paged attention (split-K
//     decode, varlen prefill), SwiGLU, logits gather, argmax and top-k/top-p sampling.
//
// The tests compare every kernel with a float64 reference computed in Go and skip when no
// GPU is present; scripts/gpu_test.sh runs them on a GPU machine and writes a table.
package cuda
