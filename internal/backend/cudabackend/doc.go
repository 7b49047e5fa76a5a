// Package cudabackend implements the backend op set (package backend) on one NVIDIA GPU,
// on the bindings, device and kernel launchers of package cuda, as cpubackend does on
// package cpu's kernels.
//
// What is here:
//
//   - Backend (backend.go): NewBackend opens the device, NVRTC and cuBLAS and loads the
//     kernels; weights, tensors, KV caches and a step's metadata are uploaded to device
//     memory (tensor.go); every op is queued on the device's stream from its goroutine.
//   - The ops (ops.go, fused.go): each checks its operands and launches cuda's kernels or
//     cuBLAS; 16-bit shadows of activations spare cuBLAS a cast (shadow.go).
//   - Graphs (graph.go): the ops of a step of a few tokens per sequence (decode, speculative
//     verification) are captured once per shape (sequence bucket, tokens per sequence,
//     block-table stride) and replayed.
//   - Mixtures of experts (moe.go): routing on the device, the token-expert pairs sorted
//     by expert there, grouped GEMVs over all experts in one launch (graph-safe) or, for
//     prefill, each used expert through the dense MatMul; the shared expert's gate.
//   - Device argmax and sampling of the logits under vocabulary masks (sample.go), KV
//     block read/write and copy (kvblocks.go), and the NCCL communicator group of tensor
//     and pipeline parallelism (comm.go).
//
// The tests run on a GPU and skip without one; scripts/gpu_test.sh runs them with cuda's.
package cudabackend
