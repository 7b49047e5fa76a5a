#!/usr/bin/env bash
# "Never slower" for speculative decoding (issue 15): kvasir bench offline without
# speculation and with each method, at each concurrency, alternated round by round (plain,
# ngram, draft, plain, ngram, draft, ...), printing a Markdown table of output tok/s with
# each method's ratio to the plain run of its round, and the acceptance it measured.
#   TARGET=model DRAFT=draft-model [DEVICE=cpu|cuda] [CONCURRENCY="1 8 32 128"] [ROUNDS=2]
#   [METHODS="plain ngram draft"] [K=4] [INPUT_LEN=128] [OUTPUT_LEN=128] [EXTRA="flags"]
#   [KVASIR=bin/kvasir] [BINARIES="a=bin/kvasir b=/tmp/other"] [DRAFT2=other-draft] [LOG=file] bash scripts/spec_bench.sh
# DRAFT2 compares two draft models in one call: methods draft2 and fixed2 are draft and
# fixed with DRAFT2 (a Q8_0 GGUF of DRAFT, say) in place of DRAFT.
# BINARIES compares builds in one call: each round runs every speculative method with each
# binary in turn (plain with the first), so that "method@name" rows of one round share their
# plain run and the machine's drift between builds is alternated away.
# Each run has max(8, 2 x C) requests of INPUT_LEN random prompt tokens and OUTPUT_LEN
# output tokens (ignore_eos, greedy); the speculative runs use dynamic draft lengths up to K.
# "CPU x plain" is the plain run's CPU time (user + system, model loading included, from
# /usr/bin/time; "-" where it is missing) over the method's: the same work ratio as "x plain" where the machine is
# not shared, and far steadier where it is (wall-clock throughput there follows the
# share of the cores a run happens to get).
# With DECODE_CPU=1 each run is followed by the same run with --output-len 1 (model loading,
# prefill and the first token only), and "decode CPU x plain" is the ratio of the CPU times
# less those: the decode phase's work ratio, which the speedup predicted from acceptance
# and step costs speaks of (the draft model's catch-up on the prompts stays in it).
set -uo pipefail
def="default=${KVASIR:-bin/kvasir}"
bins=${BINARIES:-$def}
device=${DEVICE:-cpu}
conc=${CONCURRENCY:-"1 8 32 128"}
rounds=${ROUNDS:-2}
methods=${METHODS:-"plain ngram draft"}
K=${K:-4}
log=${LOG:-/dev/null}
: "${TARGET:?TARGET: the target model}"
declare -A specs=(
	[plain]=""
	[ngram]="{\"method\": \"ngram\", \"num_speculative_tokens\": $K}"
	[draft]="{\"model\": \"${DRAFT:-}\", \"num_speculative_tokens\": $K}"
	[fixed]="{\"model\": \"${DRAFT:-}\", \"num_speculative_tokens\": $K, \"dynamic\": false}"
	[draft2]="{\"model\": \"${DRAFT2:-}\", \"num_speculative_tokens\": $K}"
	[fixed2]="{\"model\": \"${DRAFT2:-}\", \"num_speculative_tokens\": $K, \"dynamic\": false}"
)
# field prints a number of the JSON results.
field() { grep -o "\"$1\": *[0-9.e+-]*" | head -1 | sed 's/.*: *//'; }
echo "\`kvasir bench offline --device $device -m $(basename "$TARGET") --input-len ${INPUT_LEN:-128} --output-len ${OUTPUT_LEN:-128} --ignore-eos --temperature 0 --max-concurrency C --num-prompts max(8, 2C) ${EXTRA:-}\`, speculative: K = $K, draft $(basename "${DRAFT:-none}")${DRAFT2:+, draft2 $(basename "$DRAFT2")}"
echo
echo "| C | round | method | output tok/s | x plain | CPU s | CPU x plain | decode CPU x plain | acceptance % | acceptance length | verifications |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
times=$(mktemp)
trap 'rm -f "$times"' EXIT
for c in $conc; do
	n=$((2 * c))
	[ "$n" -ge 8 ] || n=8
	for r in $(seq "$rounds"); do
		plain="" plaincpu="" plaindec=""
		for m in $methods; do
			for b in $bins; do
			k=${b#*=}
			label=$m
			[ "$m" != plain ] && [ "$bins" != "$def" ] && label="$m@${b%%=*}"
			args=(bench offline --device "$device" -m "$TARGET" --num-prompts "$n" --max-concurrency "$c"
				--input-len "${INPUT_LEN:-128}" --output-len "${OUTPUT_LEN:-128}" --ignore-eos --temperature 0 --seed "$r" --json)
			[ -n "${specs[$m]}" ] && args+=(--speculative-config "${specs[$m]}")
			# shellcheck disable=SC2086
			if [ -x /usr/bin/time ]; then
				res=$(/usr/bin/time -f "%U %S" -o "$times" $k "${args[@]}" ${EXTRA:-} 2>>"$log")
				cpu=$(awk '{ printf "%.2f", $1 + $2 }' "$times")
			else # no GNU time (a bare GPU machine): no CPU columns
				res=$($k "${args[@]}" ${EXTRA:-} 2>>"$log")
				cpu=""
			fi
			echo "C=$c round=$r $label: $res" >>"$log"
			dec=""
			if [ "${DECODE_CPU:-0}" = 1 ] && [ -n "$cpu" ]; then
				base=("${args[@]}")
				for i in "${!base[@]}"; do [ "${base[$i]}" = --output-len ] && base[i+1]=1; done
				# shellcheck disable=SC2086
				/usr/bin/time -f "%U %S" -o "$times" $k "${base[@]}" ${EXTRA:-} >/dev/null 2>>"$log"
				dec=$(awk -v a="$cpu" '{ printf "%.2f", a - $1 - $2 }' "$times")
			fi
			tps=$(echo "$res" | field output_throughput)
			acc=$(echo "$res" | field spec_decode_acceptance_rate)
			nd=$(echo "$res" | field spec_decode_num_drafts)
			al=$(echo "$res" | field spec_decode_acceptance_length)
			[ -n "$al" ] && al=$(awk -v a="$al" 'BEGIN { printf "%.2f", a }')
			[ "$m" = plain ] && plain=$tps plaincpu=$cpu plaindec=$dec
			ratio=- cratio=- dratio=-
			[ -n "$plaindec" ] && [ -n "$dec" ] && dratio=$(awk -v a="$dec" -v b="$plaindec" 'BEGIN { printf "%.3f", b / a }')
			[ -n "$plain" ] && [ -n "$tps" ] && ratio=$(awk -v a="$tps" -v b="$plain" 'BEGIN { printf "%.3f", a / b }')
			[ -n "$plaincpu" ] && [ -n "$cpu" ] && cratio=$(awk -v a="$cpu" -v b="$plaincpu" 'BEGIN { printf "%.3f", b / a }')
			[ -n "$acc" ] && acc=$(awk -v a="$acc" 'BEGIN { printf "%.1f", a }')
			printf '| %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %s |\n' "$c" "$r" "$label" "${tps:-0}" "$ratio" "${cpu:--}" "$cratio" "$dratio" "${acc:--}" "${al:--}" "${nd:--}"
			[ "$m" = plain ] && break # plain runs once, with the first binary
			done
		done
	done
done
