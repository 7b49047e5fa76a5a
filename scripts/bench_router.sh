#!/usr/bin/env bash
# bench_router.sh: the prefix-cache hit rate of the prefix-repetition workload on one
# kvasir serve instance alone and on N instances behind kvasir router under each policy
# given, from the instances' own counters (kvasir:prefix_cache_hits_total over
# kvasir:prefix_cache_queries_total, summed). Every run starts fresh instances.
#
#   scripts/bench_router.sh [N] [POLICY...]      (default: 4 cache_aware random)
#
# KVASIR (default: go build) is the binary; BENCH_ARGS overrides the workload flags.
set -euo pipefail
n=${1:-4}
shift || true
policies=("${@:-cache_aware}")
[ $# -eq 0 ] && policies=(cache_aware random)
bin=${KVASIR:-}
if [ -z "$bin" ]; then
	bin=$(mktemp -d)/kvasir
	go build -o "$bin" ./cmd/kvasir
fi
bench_args=${BENCH_ARGS:---dataset-name prefix-repetition --num-prompts 64 --prefix-repetition-num-prefixes 8 --prefix-repetition-prefix-len 128 --prefix-repetition-suffix-len 32 --prefix-repetition-output-len 4 --max-concurrency 4 --seed 1}
work=$(mktemp -d)
# stop_all ends every process started (their pids are in $work/pids).
stop_all() {
	if [ -f "$work/pids" ]; then
		while read -r p; do kill "$p" 2>/dev/null || true; done <"$work/pids"
		while read -r p; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done <"$work/pids"
		rm -f "$work/pids"
	fi
}
trap 'stop_all; rm -rf "$work"' EXIT

# start NAME ARGS...: runs kvasir ARGS on a free port and prints its URL.
start() {
	local name=$1
	shift
	"$bin" "$@" --port 0 >/dev/null 2>"$work/$name.log" &
	echo $! >>"$work/pids"
	for _ in $(seq 600); do
		if url=$(grep -o 'http://[0-9.:]*' "$work/$name.log" | head -1) && [ -n "$url" ]; then
			echo "$url"
			return
		fi
		sleep 0.1
	done
	echo "$name did not start:" >&2
	cat "$work/$name.log" >&2
	exit 1
}

# hit_rate URL...: the summed prefix-cache hit rate of the instances.
hit_rate() {
	local q=0 h=0
	for u in "$@"; do
		local m
		m=$(curl -s "$u/metrics")
		q=$(awk -v q="$q" '/^kvasir:prefix_cache_queries_total/ {q += $2} END {print q}' <<<"$m")
		h=$(awk -v h="$h" '/^kvasir:prefix_cache_hits_total/ {h += $2} END {print h}' <<<"$m")
	done
	awk -v q="$q" -v h="$h" 'BEGIN {printf "%.3f (%d of %d prompt tokens)\n", (q ? h / q : 0), h, q}'
}

# run LABEL POLICY: N instances (1 when POLICY is "single") and the workload.
run() {
	local label=$1 policy=$2 count=$n urls=() backends=()
	[ "$policy" = single ] && count=1
	for i in $(seq "$count"); do
		urls+=("$(start "$label-$i" serve --threads 1)")
		backends+=(--backend "${urls[-1]}")
	done
	local target=${urls[0]}
	if [ "$policy" != single ]; then
		target=$(start "$label-router" router --policy "$policy" "${backends[@]}")
		sleep 1
	fi
	# shellcheck disable=SC2086
	"$bin" bench serve --base-url "$target" $bench_args --disable-tqdm >"$work/$label.bench" 2>&1 || {
		cat "$work/$label.bench" >&2
		exit 1
	}
	printf '%-28s hit rate %s\n' "$label" "$(hit_rate "${urls[@]}")"
	stop_all
}

run "1 instance" single
for p in "${policies[@]}"; do
	run "$n instances, $p" "$p"
done
