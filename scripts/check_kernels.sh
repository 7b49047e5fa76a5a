#!/usr/bin/env bash
# Parses and type-checks the CUDA kernels (internal/backend/cuda/kernels/*.cu, *.cuh) with the host
# C++ compiler, against stand-ins for the CUDA built-ins (scripts/cuda_host_stubs.h). NVRTC
# compiles the kernels only at run time on a GPU machine, so without this check a syntax or
# template error would first show there. Inline PTX (asm statements) is not checked.
#   bash scripts/check_kernels.sh      # needs g++ (or CXX)
# Each kernel file is checked as the program KernelPrograms assembles for NVRTC: common.cu,
# the .cuh files, then the file (so a file that calls into another fails here as there).
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=${CXX:-g++}
dir=internal/backend/cuda/kernels
tmp=$(mktemp --suffix=.cpp)
trap 'rm -f "$tmp"' EXIT
# Each program as NVRTC gets it: common.cu, the .cuh files, one kernel file.
n=0
for prog in $(ls "$dir"/*.cu | grep -v '/common.cu$'); do
	{
		cat scripts/cuda_host_stubs.h
		for f in "$dir/common.cu" $(ls "$dir"/*.cuh 2>/dev/null) "$prog"; do
			echo "#line 1 \"$f\""
			sed -E 's/\basm( volatile)? *\(/asm_(/g' "$f"
		done
	} >"$tmp"
	"$cxx" -std=c++17 -fsyntax-only -w "$tmp" || { echo "kernel program $(basename "$prog") does not parse or type-check" >&2; exit 1; }
	n=$((n + 1))
done
echo "kernels parse and type-check ($n programs, each with common.cu and the .cuh files)"
