#!/usr/bin/env bash
# The project's test command: formatting, vet, every package's tests (the CPU kernels under
# both their SIMD and their pure-Go dispatch), the server's and the engine's tests under the
# race detector, the abuse suite (test/abuse, on its own: it measures latencies), then each
# fuzz target for a short time.
#
#   bash scripts/test.sh            # everything
#   FUZZTIME=0 bash scripts/test.sh # skip the fuzzing pass
#
# The last line says how many tests skipped and why (no test data beside the clone, no GPU,
# ...); the skipped tests of other reasons are listed just before it.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-4s}

# skips collects "TEST<TAB>REASON" for every test skipped, for the last line's summary.
skips=$(mktemp)
trap 'rm -f "$skips"' EXIT

# gotest runs go test -v with its arguments, showing the package lines (ok, FAIL) as they
# come; it records the skipped tests with their reasons in $skips, and on a failure prints
# the log without the lines of passing tests and exits.
gotest() {
	local log rc
	log=$(mktemp)
	set +e
	go test -v "$@" 2>&1 | tee "$log" | grep -E '^(ok|FAIL|\?) '
	rc=${PIPESTATUS[0]}
	set -e
	# go test -v prints a test's log lines after its "=== RUN/CONT/NAME" line and before its
	# "--- SKIP": the skip's reason is the last log line of that test.
	awk '/^=== (RUN|CONT|NAME) /{cur=$3; next}
		/^ +[^ ]+\.go:[0-9]+: /{line=$0; sub(/^ +[^ ]+\.go:[0-9]+: /, "", line); last[cur]=line; next}
		/^ *--- SKIP: /{print $3 "\t" last[$3]}' "$log" >>"$skips"
	if [ "$rc" != 0 ]; then
		grep -v -E '^(=== (RUN|PAUSE|CONT|NAME)|[[:space:]]*--- PASS)' "$log" || true
		rm -f "$log"
		exit "$rc"
	fi
	rm -f "$log"
}

# skipSummary says how many tests skipped and why, grouped: no test data beside the clone,
# no GPU, no node/npm, no Chromium, other (listed).
skipSummary() {
	local n
	n=$(wc -l <"$skips")
	if [ "$n" = 0 ]; then
		echo "no test skipped"
		return
	fi
	awk -F'\t' '$2 !~ /testdata|GPU|CUDA|cuda|NVRTC|nvrtc|node|npm|[Cc]hromium/ {print "   skipped: " $1 ": " $2}' "$skips"
	awk -F'\t' -v n="$n" '{
		r = $2
		if (r ~ /testdata/) k = "no test data beside the clone (../shared/testdata)"
		else if (r ~ /GPU|CUDA|cuda|NVRTC|nvrtc/) k = "no GPU"
		else if (r ~ /node|npm/) k = "no node/npm"
		else if (r ~ /[Cc]hromium/) k = "no Chromium"
		else k = "other reasons (listed above)"
		c[k]++
	} END {
		s = n " tests skipped: "
		sep = ""
		for (k in c) { s = s sep c[k] " " k; sep = ", " }
		print s
	}' "$skips"
}

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "these files need gofmt:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== CUDA kernels (host C++ parse, scripts/check_kernels.sh)"
if command -v "${CXX:-g++}" >/dev/null 2>&1; then
	bash scripts/check_kernels.sh
elif [ "${KVASIR_REQUIRE_TESTDATA:-}" = 1 ]; then
	echo "no C++ compiler (g++) to check the CUDA kernels with"; exit 1
else
	echo "no g++: the kernel check is not run here (CI installs g++ and runs it)"
fi

# Every package but the abuse suite, which runs alone below.
pkgs=$(go list ./... | grep -v '/test/abuse$')

# A package's tests get 20 minutes (go test's default is 10): CI's fresh 2-core machine runs
# two packages at once, and the server package's npm tests drive a few dozen servers.
echo "== go test"
gotest -count=1 -timeout 20m $pkgs

# Which SIMD kernel sets the differential tests above compared with the pure-Go twins on
# this CPU, and which they skipped for lack of the instructions (KVASIR_REQUIRE_CPU=avx512
# makes a missing set fail).
echo "== CPU kernel sets tested"
go test -count=1 -v -run '^(TestKernelSetCoverage|TestGemmBF16Tiles)$' ./internal/backend/cpu | grep -E -e '--- (PASS|SKIP|FAIL)|NOT tested|compared with|equal to the twin'

echo "== go test (pure-Go kernels, KVASIR_CPU=generic)"
KVASIR_CPU=generic go test -count=1 ./internal/backend/...

# The race detector needs cgo (a C compiler; CI's g++ brings one). The npm client tests drive
# a separately built binary, so the detector would not see its server; the npm tool-calling
# test's in-process servers take the paths the Go tool-call tests run under the detector, and
# it alone took over 9 of the package's 10 minutes there (dozens of servers, each answering a
# node test run); TestGreedyInvariance
# runs its engine configurations on the synthetic model only, since the real models' runs
# take the same paths and cost ten times as long under the detector. Both ran in full above.
echo "== go test -race (server and engine)"
if [ "$(go env CGO_ENABLED)" = 1 ]; then
	go test -race -count=1 -timeout 20m -skip '^(TestOpenAINpmClient|TestOllamaNpmClient|TestOpenAINpmTools)$' ./internal/server
	go test -race -count=1 -timeout 20m -skip '^TestGreedyInvariance$/^stories260K' ./internal/engine
elif [ "${KVASIR_REQUIRE_TESTDATA:-}" = 1 ]; then
	echo "the race detector needs cgo: no C compiler (CGO_ENABLED=$(go env CGO_ENABLED))"; exit 1
else
	echo "no cgo (no C compiler): the race run is not done here (CI installs g++ and runs it)"
fi

echo "== abuse suite (test/abuse)"
gotest -count=1 ./test/abuse

if [ "$fuzztime" != "0" ]; then
	echo "== fuzz ($fuzztime per target)"
	for pkg in $pkgs; do
		for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
			echo "-- $pkg $target"
			log=$(mktemp)
			if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1; then
				# Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a failure
				# (go.dev/issue/75804, fixed in Go 1.27). Only a failing input is a finding.
				if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
					echo "   (stopped by go.dev/issue/75804 at the time limit; no failing input)"
				else
					cat "$log"; rm -f "$log"; exit 1
				fi
			fi
			rm -f "$log"
		done
	done
fi
summary=$(skipSummary)
if [ "$(printf '%s\n' "$summary" | wc -l)" -gt 1 ]; then printf '%s\n' "$summary" | head -n -1; fi
echo "== all tests passed; $(printf '%s\n' "$summary" | tail -n 1)"
