#!/usr/bin/env bash
# Measures speculative decoding on a GPU machine in one go (issue 15), with synthesized BF16
# models: the cost of a verify step against a decode step (llama-3.1-8b, batch 1, 4 and 16),
# and "never slower": bench offline of llama-3.1-8b without speculation, with ngram and with
# llama-3.2-1b as a draft model (dynamic draft lengths, K = 4), at each concurrency of
# $CONCURRENCY, alternated round by round ($ROUNDS rounds). Random weights make acceptance
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

# prompts returns the requests of a run at concurrency C: enough for a few waves.
prompts() { if [ "$1" -lt 8 ]; then echo 8; else echo $((2 * $1)); fi; }
declare -A specs=(
	[plain]=""
	[ngram]='{"method": "ngram", "num_speculative_tokens": 4}'
	[draft]="{\"model\": \"$dir/llama-3.2-1b.gguf\", \"num_speculative_tokens\": 4}"
)
echo >>"$md"
echo "bench offline --device cuda -m llama-3.1-8b.gguf --input-len 128 --output-len 128 --ignore-eos --temperature 0 --kv-cache-memory 17179869184 --max-num-seqs 256 --max-num-batched-tokens 8192 --max-concurrency C --num-prompts max(8, 2C) [--speculative-config ...]" >>"$md"
echo >>"$md"
echo "| C | round | method | output tok/s | acceptance % | drafts |" >>"$md"
echo "| --- | --- | --- | --- | --- | --- |" >>"$md"
for c in $conc; do
	for r in $(seq "$rounds"); do
		for name in plain ngram draft; do
			args=(bench offline --device cuda -m "$target" --num-prompts "$(prompts "$c")" --max-concurrency "$c"
				--input-len 128 --output-len 128 --ignore-eos --temperature 0 --kv-cache-memory 17179869184
				--max-num-seqs 256 --max-num-batched-tokens 8192 --seed "$r" --json)
			[ -n "${specs[$name]}" ] && args+=(--speculative-config "${specs[$name]}")
			res=$($k "${args[@]}" 2>>"$log")
			echo "C=$c round=$r $name: $res" >>"$log"
			tps=$(echo "$res" | grep -o '"output_throughput": *[0-9.]*' | grep -o '[0-9.]*$')
			acc=$(echo "$res" | grep -o '"spec_decode_acceptance_rate": *[0-9.]*' | grep -o '[0-9.]*$')
			nd=$(echo "$res" | grep -o '"spec_decode_num_drafts": *[0-9]*' | grep -o '[0-9]*$')
			echo "| $c | $r | $name | ${tps:-failed} | ${acc:--} | ${nd:--} |" >>"$md"
		done
	done
done
cat "$md"
