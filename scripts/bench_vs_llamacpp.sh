#!/usr/bin/env bash
# bench_vs_llamacpp.sh: kvasir's CPU prefill and decode against an existing llama.cpp build
# on the same GGUF files, the two run in alternation (kvasir, llama.cpp, kvasir, ...) so
# that a drift in the machine's speed touches both, with the ratios kvasir / llama.cpp.
#
#   scripts/bench_vs_llamacpp.sh LLAMA_BIN_DIR MODEL.gguf...
#
# LLAMA_BIN_DIR holds llama-bench (llama.cpp is built by hand, outside this repository).
# Each round runs `kvasir bench generate -m MODEL --prompt-len P --gen-len N --threads T
# --json` and `llama-bench -m MODEL -p P -n N -t T -r R -o jsonl`. Environment:
#   KVASIR   the kvasir binary (default: built from this checkout into a temporary folder)
#   ROUNDS   rounds per model (default 2)
#   PROMPT   prompt tokens (default 128)      GEN      generated tokens (default 64)
#   THREADS  threads of both (default 2)      REPS     llama-bench repetitions (default 1)
# It prints the CPU's AVX-512 flags, then a line per round: the 1-minute load average when
# the round began, prefill and decode tokens/s of each and their ratios.
set -euo pipefail

if [ $# -lt 2 ]; then
	echo "usage: $0 LLAMA_BIN_DIR MODEL.gguf..." >&2
	exit 2
fi
llama_bench="$1/llama-bench"
shift
if [ ! -x "$llama_bench" ]; then
	echo "$0: no llama-bench in the given folder ($llama_bench)" >&2
	exit 2
fi
rounds="${ROUNDS:-2}" prompt="${PROMPT:-128}" gen="${GEN:-64}" threads="${THREADS:-2}" reps="${REPS:-1}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
kvasir="${KVASIR:-}"
if [ -z "$kvasir" ]; then
	(cd "$(dirname "$0")/.." && go build -o "$tmp/kvasir" ./cmd/kvasir)
	kvasir="$tmp/kvasir"
fi

# run runs a command with its standard error kept in a file, shown only if it fails.
run() {
	if ! "$@" 2>"$tmp/err"; then
		echo "$0: $* failed:" >&2
		cat "$tmp/err" >&2
		exit 1
	fi
}

# field prints the number after "NAME": in the JSON text $1.
field() { sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p" <<<"$1" | head -n 1; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "prompt $prompt, gen $gen, threads $threads, llama-bench repetitions $reps"
for model in "$@"; do
	for round in $(seq 1 "$rounds"); do
		load="$(cut -d' ' -f1 /proc/loadavg)"
		k="$(run "$kvasir" bench generate -m "$model" --prompt-len "$prompt" --gen-len "$gen" --threads "$threads" --json)"
		l="$(run "$llama_bench" -m "$model" -p "$prompt" -n "$gen" -t "$threads" -r "$reps" -o jsonl)"
		kp="$(field "$k" prefill_tokens_per_s)"
		kd="$(field "$k" decode_tokens_per_s)"
		lp="$(field "$(grep '"n_gen": 0,' <<<"$l")" avg_ts)"
		ld="$(field "$(grep '"n_prompt": 0,' <<<"$l")" avg_ts)"
		awk -v m="$(basename "$model")" -v r="$round" -v load="$load" -v kp="$kp" -v kd="$kd" -v lp="$lp" -v ld="$ld" 'BEGIN {
			printf "%s round %d (load %s): prefill kvasir %.1f llama.cpp %.1f tok/s = %.2fx; decode kvasir %.2f llama.cpp %.2f tok/s = %.2fx\n",
				m, r, load, kp, lp, kp / lp, kd, ld, kd / ld
		}'
	done
done
