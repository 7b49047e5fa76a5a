#!/usr/bin/env bash
# bench_disagg.sh: Mooncake-trace goodput of (a) one kvasir serve instance, (b) two
# instances of role both behind kvasir router, (c) one prefill and one decode instance
# behind kvasir router (prefill/decode disaggregation, docs/KV_TRANSFER.md), one
# `kvasir bench serve --dataset-name mooncake` run each, every run on fresh instances.
#
#   scripts/bench_disagg.sh [MODEL]    (default: ../shared/testdata/models/trained/target)
#
# On the CPU the cores are split: (a) gets --threads $((2*T)), each instance of (b) and
# (c) --threads T (THREADS=T, default 1). With DEVICE=cuda every instance runs on the one
# GPU: (a) with --gpu-memory-utilization 0.9, the two processes of (b) and of (c) with 0.45
# each. KVASIR (default: go build) is the binary; BENCH_ARGS overrides the workload flags,
# GOODPUT the service level objectives. Prompts come from the model's own tokenizer (the
# router serves no /tokenize), the same token ids in every run.
set -euo pipefail
model=${1:-../shared/testdata/models/trained/target}
trace=${TRACE:-../shared/testdata/workloads/mooncake_synthetic_trace.jsonl}
threads=${THREADS:-1}
device=${DEVICE:-cpu}
bin=${KVASIR:-}
if [ -z "$bin" ]; then
	bin=$(mktemp -d)/kvasir
	go build -o "$bin" ./cmd/kvasir
fi
bench_args=${BENCH_ARGS:---num-prompts 40 --mooncake-block-size 4 --mooncake-max-output-len 32 --mooncake-time-scale 1.5 --seed 1}
goodput=${GOODPUT:---goodput ttft:2000 --goodput tpot:100}
work=$(mktemp -d)
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
	for _ in $(seq 1200); do
		if url=$(grep -o 'on http://[0-9.:]*' "$work/$name.log" | head -1 | cut -c4-) && [ -n "$url" ]; then
			echo "$url"
			return
		fi
		sleep 0.1
	done
	echo "$name did not start:" >&2
	cat "$work/$name.log" >&2
	exit 1
}

# serve NAME SHARE ARGS...: a kvasir serve instance of the model with its share of the
# machine (1: all of it, 2: half).
serve() {
	local name=$1 share=$2
	shift 2
	if [ "$device" = cpu ]; then
		start "$name" serve -m "$model" --threads $((2 * threads / share)) --disable-access-log "$@"
	else
		start "$name" serve -m "$model" --device "$device" --gpu-memory-utilization "$(awk -v s="$share" 'BEGIN {print 0.9 / s}')" --disable-access-log "$@"
	fi
}

# bench LABEL URL: one benchmark run against URL, its summary printed.
bench() {
	echo "== $1"
	# shellcheck disable=SC2086
	"$bin" bench serve --base-url "$2" --tokenizer "$model" --dataset-name mooncake --dataset-path "$trace" $bench_args $goodput --disable-tqdm |
		grep -E 'Successful|Failed|duration|Request throughput|goodput|Output token throughput|TTFT \(ms\)|TPOT \(ms\)'
}

a=$(serve a 1)
bench "(a) one instance" "$a"
stop_all

b1=$(serve b1 2)
b2=$(serve b2 2)
r=$(start router-b router --backend "$b1" --backend "$b2")
sleep 1
bench "(b) two instances behind the router" "$r"
stop_all

p=$(serve prefill 2 --role prefill)
d=$(serve decode 2 --role decode --kv-transfer-port 0)
r=$(start router-c router --prefill "$p" --decode "$d")
sleep 1
bench "(c) one prefill + one decode behind the router" "$r"
curl -s "$r/metrics" | grep '^kvasir:router_prefills_total' || true
stop_all
