#!/usr/bin/env bash
# Benchmarks the CUDA backend on a GPU machine with synthesized BF16 models, in one go:
# kvasir bench generate (decode at batch 1, prefill of 512 tokens) for each of $MODELS and
# kvasir bench offline (256 requests of 128 + 128 tokens, ignore_eos) for $OFFLINE_MODEL.
# Build the CLI where Go is: CGO_ENABLED=0 go build -o bin/kvasir ./cmd/kvasir
#   OUT=/some/dir bash scripts/gpu_bench.sh
# Writes $OUT/gpu_bench.md (commands and figures) and the JSON of every run.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu}
models=${MODELS:-"llama-3.2-1b llama-3.1-8b"}
offline=${OFFLINE_MODEL:-llama-3.1-8b}
dir=${KVASIR_GPU_MODELS:-/tmp/kvasir-models}
mkdir -p "$out" "$dir"
k=bin/kvasir
md="$out/gpu_bench.md"
echo "# kvasir CUDA benchmarks ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))" >"$md"
run() { # label, command...
	local label=$1
	shift
	echo "\$ $*" | tee -a "$md"
	local t0=$(date +%s)
	"$@" >"$out/$label.json" 2>"$out/$label.err"
	local rc=$?
	echo "exit $rc in $(( $(date +%s) - t0 ))s: $(head -c 1500 "$out/$label.json")" | tee -a "$md"
	tail -3 "$out/$label.err" | tee -a "$md"
}
for m in $models; do
	[ -e "$dir/$m.gguf" ] || $k synth --shape "$m" --dtype bf16 --quiet -o "$dir/$m.gguf"
	run "gen_$m" $k bench generate --device cuda -m "$dir/$m.gguf" --prompt-len 512 --gen-len 128 --chunk 512 --json
done
if [ -n "$offline" ]; then
	[ -e "$dir/$offline.gguf" ] || $k synth --shape "$offline" --dtype bf16 --quiet -o "$dir/$offline.gguf"
	run "offline_$offline" $k bench offline --device cuda -m "$dir/$offline.gguf" --num-prompts 256 --input-len 128 \
		--output-len 128 --ignore-eos --temperature 0 --kv-cache-memory 17179869184 --max-num-seqs 256 --max-num-batched-tokens 8192 --json
fi
