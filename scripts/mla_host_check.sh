#!/usr/bin/env bash
# Runs multi-head latent attention's kernel (internal/backend/cuda/kernels/attention_mla.cu:
# attn_mla) on the host, without a GPU, each block as 256 threads with a barrier for
# __syncthreads and per-warp exchanges for shuffles (scripts/kvq_host/emu.h), against a
# float64 reference (scripts/mla_host/main.cpp): F32 and BF16 caches (F16's conversion is
# inline PTX, which does nothing there), relative error within 2e-5. Needs g++ 11 or
# later; takes a minute or two (a thread per emulated CUDA thread).
#   bash scripts/mla_host_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dir=internal/backend/cuda/kernels
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
	cat scripts/kvq_host/emu.h
	for f in "$dir/common.cu" "$dir/attention_mla.cu"; do
		echo "#line 1 \"$f\""
		sed -E 's/\basm( volatile)? *\(/asm_(/g' "$f"
	done
} >"$tmp/prog.h"
${CXX:-g++} -std=c++20 -O2 -pthread -w -I"$tmp" -o "$tmp/mla" scripts/mla_host/main.cpp
"$tmp/mla"
