// Package cuda holds kvasir's NVIDIA GPU layer, reached from pure Go (no cgo) through
// github.com/ebitengine/purego: the bindings of the CUDA libraries, the device, the
// kernels and their typed launchers, with no notion of tensors, steps or requests.
// Package cudabackend binds them to the backend op set, as cpubackend binds package cpu.
//
// What is here:
//
//   - Bindings: Driver (driver.go) binds the CUDA driver API from libcuda.so.1, NVRTC
//     (nvrtc.go) the runtime compiler, CuBLAS (cublas.go) the GEMMs (BF16/F16/F32 inputs,
//     float32 compute), NCCL (nccl.go) the collectives of a group of GPUs (library.go
//     opens the libraries). Opening fails with a clear error when a library is absent and
//     never panics.
//   - Device (device.go, launch.go) is one GPU owned by a goroutine locked to its OS
//     thread with the primary context current; every CUDA call runs there through
//     Device.Do. It allocates buffers, copies, launches kernels, captures and replays
//     graphs, and keeps an op profile on request (optime.go).
//   - Kernels (kernels.go) are the CUDA C kernels embedded from kernels/*.cu, compiled by
//     NVRTC for the device's compute capability, the cubins cached on disk by source hash.
//   - Ops (ops.go, attention*.go, gemv.go, masks.go) launch them with typed operands,
//     checking shapes and dtypes: embedding gather, RMSNorm fused with the residual add,
//     RoPE fused with the paged KV write, paged attention (split-K decode, varlen
//     prefill), SwiGLU, the GEMV kernels of small batches, logits gather, argmax and
//     top-k/top-p sampling under vocabulary masks, and a mixture of experts' routing,
//     grouping by expert and grouped GEMVs (moe.go).
//
// The tests compare every kernel with a float64 reference computed in Go and skip when no
// GPU is present; scripts/gpu_test.sh runs them, and cudabackend's, on a GPU machine and
// writes a table.
package cuda
