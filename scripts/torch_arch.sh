#!/usr/bin/env bash
# Checks the architectures beyond the Llama family against PyTorch/transformers on a GPU
# machine, in one go: for each shape it synthesizes a float32 Hugging Face folder with
# kvasir, runs it on kvasir's CPU and CUDA backends (TestArchRecords: a 24-token prompt,
# then 32 greedy tokens; CUDA checked against the CPU), then loads it in transformers
# (float32, eager attention, greedy tokens by full forward passes) and compares the logits
# after the prompt (max |kvasir - torch| / max |torch| <= 1e-4, and the norm-wise error)
# and the 32 greedy tokens with both of kvasir's runs.
#
# Build where Go is (no cgo; nothing is compiled on the GPU machine):
#   CGO_ENABLED=0 go build -o bin/kvasir ./cmd/kvasir
#   CGO_ENABLED=0 go test -c -o bin/cudabackend.test ./internal/backend/cudabackend
#   CGO_ENABLED=0 go test -c -o bin/cuda.test ./internal/backend/cuda    # optional
# With bin/cuda.test there, the kernels of these architectures (windowed and soft-capped
# attention, GeGLU, Scale) are first checked against their float64 twins (TestGPU/variants).
# then, on the GPU machine (bin/ carried along):
#   OUT=/some/dir bash scripts/torch_arch.sh [SHAPE...]
# The shapes default to every small architecture shape: gemma2-tiny gemma3-tiny
# mistral-swa-tiny phi3-tiny granite-tiny olmo2-tiny, DeepSeek-V2's multi-head latent
# attention (deepseek-v2-tiny: a q rank, a dense layer, routed and shared experts, a routed
# scale) and DeepSeek-V3's routing on it (deepseek-v3-tiny: sigmoid scores, a selection
# bias, 2 of 4 expert groups), and the mixtures of experts mixtral-tiny qwen2moe-tiny
# qwen3moe-tiny. It writes $OUT/torch_arch.log and $OUT/torch_arch.md (the results
# table) and exits 1 when any comparison fails.
set -uo pipefail
cd "$(dirname "$0")/.."

out=${OUT:-out/arch}
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(gemma2-tiny gemma3-tiny mistral-swa-tiny phi3-tiny granite-tiny olmo2-tiny
	deepseek-v2-tiny deepseek-v3-tiny mixtral-tiny qwen2moe-tiny qwen3moe-tiny)
models=${KVASIR_ARCH_MODELS:-/tmp/kvasir-arch}
for b in bin/kvasir bin/cudabackend.test; do
	[ -x "$b" ] || { echo "no $b: build it first (see the top of $0)" >&2; exit 1; }
done
mkdir -p "$out"
rm -rf "$models" && mkdir -p "$models"
. scripts/cuda_libs.sh
log="$out/torch_arch.log"
: >"$log"

rc=0
if [ -x bin/cuda.test ]; then
	bin/cuda.test -test.v -test.count=1 -test.timeout=120s -test.run '^TestGPU$/^variants$' 2>&1 | tee -a "$log"
	[ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
for s in "${shapes[@]}"; do
	bin/kvasir synth --shape "$s" --dtype f32 --seed 1 --quiet -o "$models/$s" 2>&1 | tee -a "$log"
	[ "${PIPESTATUS[0]}" = 0 ] || rc=1
done
KVASIR_ARCH_MODELS="$models" KVASIR_GPU_OUT="$out" bin/cudabackend.test -test.v -test.count=1 -test.timeout=240s \
	-test.run '^TestArchRecords$' 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
for s in "${shapes[@]}"; do
	recs=()
	for be in cpu cuda; do
		[ -e "$out/kvasir_${s}_$be.json" ] && recs+=(--record "$out/kvasir_${s}_$be.json")
	done
	if [ ${#recs[@]} -ne 4 ]; then # --record PATH for each backend
		echo "RESULT|torch|$s|missing|kvasir records not written" | tee -a "$log"
		rc=1
		continue
	fi
	PYTHONUNBUFFERED=1 python3 scripts/torch_ref.py --hf "$models/$s" --attn eager --no-cache \
		--tol 1e-4 --max-rel-tol 1e-4 "${recs[@]}" 2>&1 | tee -a "$log"
	[ "${PIPESTATUS[0]}" = 0 ] || rc=1
done

{
	echo "# kvasir architectures vs transformers"
	echo
	echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "- gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
	echo "- transformers: $(python3 -c 'import transformers; print(transformers.__version__)' 2>/dev/null)"
	echo
	echo "| kind | what | value | detail |"
	echo "| --- | --- | --- | --- |"
	grep -o 'RESULT|.*' "$log" | awk -F'|' '{ printf "| %s | %s | %s | %s |\n", $2, $3, $4, $5 }'
	echo
	echo "Exit status $rc."
} >"$out/torch_arch.md"
cat "$out/torch_arch.md"
exit "$rc"
