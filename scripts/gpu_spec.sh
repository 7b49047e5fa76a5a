#!/usr/bin/env bash
# Measures speculative decoding on a GPU machine in one go (issue 15), with synthesized BF16
# models: the cost of a verify step against a decode step (llama-3.1-8b, batch 1, 4 and 16),
# and "never slower": bench offline of llama-3.1-8b without speculation, with ngram and with
# llama-3.2-1b as a draft model (dynamic draft lengths, K = 4), at each concurrency of
# $CONCURRENCY, alternated round by round ($ROUNDS rounds; scripts/spec_bench.sh). Random weights make acceptance
# meaningless: the draft is accepted almost never, which the dynamic policy must notice.
# Build the CLI where Go is: CGO_ENABLED=0 go build -o bin/kvasir ./cmd/kvasir
#   OUT=/some/dir bash scripts/gpu_spec.sh
# Writes $OUT/gpu_spec.md (the commands and a table of output tok/s per run) and $OUT/spec.log.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu}
dir=${KVASIR_GPU_MODELS:-/tmp/kvasir-models}
conc=${CONCURRENCY:-"1 8 32 128 256"}
rounds=${ROUNDS:-2}
k=bin/kvasir
mkdir -p "$out" "$dir"
md="$out/gpu_spec.md"
log="$out/spec.log"
: >"$log"
for m in llama-3.1-8b llama-3.2-1b; do
	[ -e "$dir/$m.gguf" ] || $k synth --shape "$m" --dtype bf16 --quiet -o "$dir/$m.gguf"
done
target=$dir/llama-3.1-8b.gguf
echo "# kvasir speculative decoding on the GPU ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))" >"$md"

verify="$k bench generate --device cuda -m $target --prompt-len 512 --gen-len 64 --verify-len 4 --verify-batch 1,4,16"
echo "\$ $verify" >>"$md"
$verify 2>>"$log" | grep -i 'verify\|decode' >>"$md"

echo >>"$md"
TARGET=$target DRAFT=$dir/llama-3.2-1b.gguf DEVICE=cuda CONCURRENCY=$conc ROUNDS=$rounds KVASIR=$k LOG=$log \
	EXTRA="--kv-cache-memory 17179869184 --max-num-seqs 256 --max-num-batched-tokens 8192" \
	bash scripts/spec_bench.sh >>"$md"
cat "$md"
