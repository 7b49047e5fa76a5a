#!/usr/bin/env bash
# Runs the CUDA backend's tests on a GPU machine in one go and writes a results table.
#
# The tests are in two packages: internal/backend/cuda (the kernels against float64
# references, the bindings) and internal/backend/cudabackend (the op set: the Backend
# through the model and the engine, graphs, shadows, KV blocks, NCCL groups). Build their
# test binaries where Go is (no cgo; nothing is compiled on the GPU machine):
#   CGO_ENABLED=0 go test -c -o bin/cuda.test ./internal/backend/cuda
#   CGO_ENABLED=0 go test -c -o bin/cudabackend.test ./internal/backend/cudabackend
# then, on the GPU machine:
#   OUT=/some/dir bash scripts/gpu_test.sh [BINARY...]
# which runs the binaries named (default: bin/cuda.test bin/cudabackend.test) one after the
# other. A binary missing under bin/ is built when Go is there. It writes $OUT/gpu_test.log (the verbose test output) and $OUT/gpu_results.md
# (device, kernel errors against the CPU references, NVRTC compile time, GEMM and copy
# figures).
#
# The Backend's model tests need files the GPU machine lacks; copy them into bin/testdata
# (stories260K.bin, tok512.bin, ref_runc_greedy200.txt) and build the CLI too:
#   CGO_ENABLED=0 go build -o bin/kvasir ./cmd/kvasir
# With bin/kvasir present, the script synthesizes BF16 llama-3.2-1b and qwen3-0.6b (GGUF
# and Hugging Face folders) under $KVASIR_GPU_MODELS (default /tmp/kvasir-models) for the
# CPU-vs-GPU tests, then compares the HF folders with PyTorch (scripts/torch_ref.py).
# SKIP_MODELS=1 skips synthesizing those models (their tests then skip); the embeddings'
# oracle (scripts/torch_embed.py: the BERT encoder and Qwen3/Llama last-token embeddings,
# kvasir on the CPU and on the GPU) runs whenever bin/kvasir and python3 are there.
# TEST_RUN restricts the tests (a -test.run pattern, given to every binary). With
# bin/kvasir.test present (the root package's tests: CGO_ENABLED=0 go test -c -o
# bin/kvasir.test .), its GPU tests (the engine on a GPU: device sampling, processor masks,
# loading onto a device, the split model) run too, under ROOT_RUN (default '^TestGPU').
set -uo pipefail
cd "$(dirname "$0")/.."

out=${OUT:-out/gpu}
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(bin/cuda.test bin/cudabackend.test)
mkdir -p "$out"

# pkgOf prints the package a test binary is built from, by its name.
pkgOf() {
	case "$(basename "$1" .test)" in
	cuda) echo ./internal/backend/cuda ;;
	cudabackend) echo ./internal/backend/cudabackend ;;
	kvasir) echo . ;;
	*) return 1 ;;
	esac
}

for bin in "${bins[@]}"; do
	[ -x "$bin" ] && continue
	if ! pkg=$(pkgOf "$bin"); then
		echo "no test binary at $bin, and no package known to build it from" >&2
		exit 1
	fi
	if command -v go >/dev/null; then
		CGO_ENABLED=0 go test -c -o "$bin" "$pkg" || exit 1
	else
		echo "no test binary at $bin and no Go toolchain to build one" >&2
		exit 1
	fi
done

# NVRTC, cuBLAS and NCCL: on the loader's path (scripts/cuda_libs.sh).
. scripts/cuda_libs.sh

{
	echo "# kvasir CUDA backend: GPU test results"
	echo
	echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "- gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
	echo "- binaries: ${bins[*]}"
	echo
} >"$out/gpu_results.md"

[ -d bin/testdata ] && export KVASIR_GPU_TESTDATA=${KVASIR_GPU_TESTDATA:-$PWD/bin/testdata}
export KVASIR_GPU_OUT=${KVASIR_GPU_OUT:-$out}
if [ -x bin/kvasir ] && [ "${SKIP_MODELS:-0}" != 1 ]; then
	export KVASIR_GPU_MODELS=${KVASIR_GPU_MODELS:-/tmp/kvasir-models}
	mkdir -p "$KVASIR_GPU_MODELS"
	for s in llama-3.2-1b qwen3-0.6b; do
		[ -e "$KVASIR_GPU_MODELS/$s.gguf" ] || bin/kvasir synth --shape "$s" --dtype bf16 --quiet -o "$KVASIR_GPU_MODELS/$s.gguf"
		[ -e "$KVASIR_GPU_MODELS/$s" ] || bin/kvasir synth --shape "$s" --dtype bf16 --quiet -o "$KVASIR_GPU_MODELS/$s"
	done
	for q in q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k; do
		f="$KVASIR_GPU_MODELS/qwen3-0.6b-$q.gguf"
		[ -e "$f" ] || bin/kvasir synth --shape qwen3-0.6b --dtype "$q" --quiet -o "$f"
	done
fi

start=$(date +%s)
rc=0
: >"$out/gpu_test.log"
for bin in "${bins[@]}"; do
	echo "=== $bin" | tee -a "$out/gpu_test.log"
	"$bin" -test.v -test.count=1 -test.timeout=300s ${TEST_RUN:+-test.run "$TEST_RUN"} 2>&1 | tee -a "$out/gpu_test.log"
	status=${PIPESTATUS[0]}
	[ "$status" = 0 ] || rc=$status
done
if [ -x bin/kvasir.test ] && [[ " ${bins[*]} " != *" bin/kvasir.test "* ]]; then
	echo "=== bin/kvasir.test" | tee -a "$out/gpu_test.log"
	bin/kvasir.test -test.v -test.count=1 -test.timeout=300s -test.run "${ROOT_RUN:-^TestGPU}" 2>&1 | tee -a "$out/gpu_test.log"
	status=${PIPESTATUS[0]}
	[ "$status" = 0 ] || rc=$status
fi
if [ -x bin/kvasir ] && command -v python3 >/dev/null; then
	for s in llama-3.2-1b qwen3-0.6b; do
		rec="$KVASIR_GPU_OUT/kvasir_$s.json"
		[ -e "$rec" ] || continue
		PYTHONUNBUFFERED=1 python3 scripts/torch_ref.py --hf "$KVASIR_GPU_MODELS/$s" --record "$rec" 2>&1 | tee -a "$out/gpu_test.log"
		[ "${PIPESTATUS[0]}" = 0 ] || rc=1
	done
	# Embeddings (the BERT encoder, decoders' last tokens) against transformers, kvasir on
	# the CPU and on the GPU.
	for dev in cpu cuda; do
		PYTHONUNBUFFERED=1 python3 scripts/torch_embed.py --kvasir bin/kvasir --kvasir-device "$dev" 2>&1 | tee -a "$out/gpu_test.log"
		[ "${PIPESTATUS[0]}" = 0 ] || rc=1
	done
fi
secs=$(( $(date +%s) - start ))

{
	echo "| kind | what | value | detail |"
	echo "| --- | --- | --- | --- |"
	grep -o 'RESULT|.*' "$out/gpu_test.log" | awk -F'|' '{ printf "| %s | %s | %s | %s |\n", $2, $3, $4, $5 }'
	echo
	echo "Tests: exit status $rc in ${secs}s; $(grep -c -- '--- PASS' "$out/gpu_test.log") passed, $(grep -c -- '--- FAIL' "$out/gpu_test.log") failed, $(grep -c -- '--- SKIP' "$out/gpu_test.log") skipped."
	if grep -q -- '--- FAIL' "$out/gpu_test.log"; then
		echo
		echo "Failures:"
		echo '```'
		grep -B2 -A8 -- '--- FAIL\|Error\|error' "$out/gpu_test.log" | head -80
		echo '```'
	fi
} >>"$out/gpu_results.md"
cat "$out/gpu_results.md"
exit "$rc"
