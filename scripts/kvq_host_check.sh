#!/usr/bin/env bash
# Runs the quantized KV cache's kernels (internal/backend/cuda/kernels/attention_kvq.cu:
# rope_kvq, attn_decode_grpq, attn_prefillq) on the host, without a GPU: each block as
# blockDim.x threads with a barrier for __syncthreads and per-warp exchanges for shuffles
# (scripts/kvq_host/emu.h), against a float64 reference over the same codes and scales
# (scripts/kvq_host/main.cpp): the store's codes and scales bit for bit, attention within
# 1e-5. Inline PTX does nothing there, so the tensor-core prefill is not covered (the GPU
# tests are: internal/backend/cudabackend TestKVQuantAttention). Needs g++ 11 or later;
# takes a few minutes (a thread per emulated CUDA thread).
#   bash scripts/kvq_host_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dir=internal/backend/cuda/kernels
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
	cat scripts/kvq_host/emu.h
	for f in "$dir/common.cu" $(ls "$dir"/*.cuh) "$dir/attention_kvq.cu"; do
		echo "#line 1 \"$f\""
		sed -E 's/\basm( volatile)? *\(/asm_(/g' "$f"
	done
} >"$tmp/prog.h"
${CXX:-g++} -std=c++20 -O2 -pthread -w -I"$tmp" -o "$tmp/kvq" scripts/kvq_host/main.cpp
"$tmp/kvq"
