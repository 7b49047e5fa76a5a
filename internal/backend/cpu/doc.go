// Package cpu holds kvasir's CPU kernels: the arithmetic of a forward step on plain Go
// slices, with no notion of tensors, steps or requests. Package cpubackend binds them to
// the backend op set: it checks each op's operands and calls the kernels here.
//
// What is here:
//
//   - A worker Pool (pool.go): a fixed set of goroutines, started once, that run the
//     data-parallel loops of every kernel; the calling goroutine takes part, and a loop
//     allocates nothing. A Pool also carries the kernel set its operations use.
//   - Matrix products over a weight in its file's block format, read in place from the
//     mapped file or from a copy in huge pages (WeightArena, arena.go) (Weight, MatMul,
//     MatMuls, MatMulSwiGLU), for F32, F16, BF16, Q8_0, Q4_0,
//     Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K weights (cpubackend dequantizes the other types row by row). Few tokens
//     run as dot products row by row (matmul.go, matmul_q0.go: quantized weights against
//     activations quantized to Q8_0 or Q8_K, as GGML does); many run as a GEMM over packed
//     panels (gemm.go, gemm_q0.go). Q8_0 and Q4_0 weights sum each row in one order for
//     any token count, so their products are batch-invariant. BF16 weights meet many
//     tokens on VDPBF16PS where the CPU runs it fast (gemm_bf16.go: AMD's; activations
//     rounded to bfloat16).
//   - Paged attention over a KVCacheLayer of F32 or F16 elements, or of int8 or FP8 codes
//     with a scale per group (dequantized a block of one kv head at a time, then the F32
//     kernels; package kvquant) (attention*.go):
//     FlashAttention-style online softmax block by block through a block table, the
//     context cut into fixed chunks whose states fold in order, so a token's output does
//     not depend on the thread count, its batch or how its prefill was chunked; keys and
//     values are written by slot (WriteKV) and whole blocks copied, read and written
//     (CopyBlock, ReadBlock, WriteBlock).
//   - The elementwise and row kernels of a layer (ops.go): RMSNorm (fused with the
//     residual add), RoPE, SwiGLU, softmax, and the greedy argmax under a vocabulary mask
//     (argmax.go); and ProbeBandwidth, the memory-bandwidth probe benchmarks compare with.
//
// Every SIMD kernel (assembly on amd64: the avx2 set in dot_amd64.s, gemm_amd64.s, ...; the
// avx512 set, which replaces the avx2 kernels that AVX-512 and VNNI make faster, in
// kernels_avx512_amd64.go and the *avx512* files) has a pure-Go twin computing the same
// function, and the tests run every set the CPU has side by side. The set is picked at run
// time by CPU feature when a Pool is made (kernels.go, kernels_amd64.go): the fastest the
// CPU supports, or the pure-Go one on other architectures; the environment variable
// KVASIR_CPU ("avx512", "avx2", "generic") forces one.
package cpu
