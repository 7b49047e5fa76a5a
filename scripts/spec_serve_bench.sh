#!/usr/bin/env bash
# "Never slower" for speculative decoding under arrivals (issue 15): kvasir serve without
# speculation and with each method, each driven by kvasir bench serve with the same seeded
# arrival process (--request-rate R --burstiness B: gamma gaps, < 1 burstier than Poisson)
# at --max-concurrency C, alternated round by round, printing a Markdown table of output
# tok/s and the server's CPU seconds (user + system of the serve process, read from /proc
# before it is stopped, model loading included) with each method's ratio to the plain run
# of its round.
#   TARGET=model DRAFT=draft-model [RATE=16] [BURSTINESS=0.25] [C=8] [NUM=48]
#   [INPUT_LEN=16] [OUTPUT_LEN=64] [ROUNDS=2] [METHODS="plain ngram draft"] [K=4]
#   [BINARIES="a=bin/kvasir b=/tmp/other"] [PORT=8391] [LOG=file] bash scripts/spec_serve_bench.sh
# With BINARIES each round runs every speculative method with each binary in turn (plain
# with the first).
set -uo pipefail
: "${TARGET:?TARGET: the target model}"
bins=${BINARIES:-default=bin/kvasir}
rate=${RATE:-16} burst=${BURSTINESS:-0.25} conc=${C:-8} num=${NUM:-48}
rounds=${ROUNDS:-2} methods=${METHODS:-"plain ngram draft"} K=${K:-4} port=${PORT:-8391}
log=${LOG:-/dev/null}
declare -A specs=(
	[plain]=""
	[ngram]="{\"method\": \"ngram\", \"num_speculative_tokens\": $K}"
	[draft]="{\"model\": \"${DRAFT:-}\", \"num_speculative_tokens\": $K}"
)
hz=$(getconf CLK_TCK)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
field() { grep -o "\"$1\": *[0-9.e+-]*" | head -1 | sed 's/.*: *//'; }
echo "\`kvasir bench serve --request-rate $rate --burstiness $burst --max-concurrency $conc --num-prompts $num --random-input-len ${INPUT_LEN:-16} --random-output-len ${OUTPUT_LEN:-64} --ignore-eos\` against \`kvasir serve -m $(basename "$TARGET")\`, K = $K, draft $(basename "${DRAFT:-none}")"
echo
echo "| round | method | output tok/s | x plain | server CPU s | CPU x plain | acceptance % | verifications |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for r in $(seq "$rounds"); do
	plain="" plaincpu=""
	for m in $methods; do
		for b in $bins; do
			k=${b#*=}
			label=$m
			[ "$m" != plain ] && [ "$bins" != "default=bin/kvasir" ] && label="$m@${b%%=*}"
			args=(serve -m "$TARGET" --port "$port" --max-num-seqs "$conc")
			[ -n "${specs[$m]}" ] && args+=(--speculative-config "${specs[$m]}")
			"$k" "${args[@]}" >>"$log" 2>&1 &
			pid=$!
			for _ in $(seq 600); do
				curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && break
				sleep 0.2
			done
			rm -f "$out"/*.json
			"$k" bench serve --base-url "http://127.0.0.1:$port" --dataset-name random --num-prompts "$num" \
				--random-input-len "${INPUT_LEN:-16}" --random-output-len "${OUTPUT_LEN:-64}" --ignore-eos \
				--request-rate "$rate" --burstiness "$burst" --max-concurrency "$conc" --seed "$r" \
				--save-result --result-dir "$out" --result-filename res.json >>"$log" 2>&1
			cpu=$(awk -v hz="$hz" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$pid/stat")
			kill "$pid"
			wait "$pid" 2>/dev/null
			res=$(cat "$out/res.json" 2>/dev/null)
			echo "round=$r $label: $res" >>"$log"
			tps=$(echo "$res" | field output_throughput)
			acc=$(echo "$res" | field spec_decode_acceptance_rate)
			nd=$(echo "$res" | field spec_decode_num_drafts)
			[ "$m" = plain ] && plain=$tps plaincpu=$cpu
			ratio=- cratio=-
			[ -n "$plain" ] && [ -n "$tps" ] && ratio=$(awk -v a="$tps" -v b="$plain" 'BEGIN { printf "%.3f", a / b }')
			[ -n "$plaincpu" ] && [ -n "$cpu" ] && cratio=$(awk -v a="$cpu" -v b="$plaincpu" 'BEGIN { printf "%.3f", b / a }')
			[ -n "$acc" ] && acc=$(awk -v a="$acc" 'BEGIN { printf "%.1f", a }')
			printf '| %s | %s | %.1f | %s | %s | %s | %s | %s |\n' "$r" "$label" "${tps:-0}" "$ratio" "${cpu:--}" "$cratio" "${acc:--}" "${nd:--}"
			[ "$m" = plain ] && break # plain runs once, with the first binary
		done
	done
done
