// Package train trains a small Llama-family model on the CPU: the forward pass of
// embedding, RMSNorm, rotary attention with a causal mask, the SwiGLU MLP and the LM head,
// and its backward pass written out by hand, op by op, with no autograd; AdamW with
// decoupled weight decay, a warmup + cosine learning-rate schedule and gradient clipping;
// and knowledge distillation: a loss on a teacher's top-k logits (KL divergence at a
// temperature, renormalized over the top k) mixed with the hard-label cross entropy.
//
// Every op has a forward function that computes its output and a backward function that,
// given the gradient of the loss with respect to that output, returns (or accumulates) the
// gradients with respect to its inputs and weights. The tests check each backward function
// against central finite differences of its forward function.
//
// Activations are row-major matrices of N rows (one per token of a batch of sequences laid
// end to end) and weights are row-major [out][in] matrices, as PyTorch and format.Tensor
// store them. The big matrix products run on the CPU backend's GEMM (see gemm.go).
package train
