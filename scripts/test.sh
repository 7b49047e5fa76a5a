#!/usr/bin/env bash
# The project's test command: formatting, vet, every package's tests (the CPU kernels under
# both their SIMD and their pure-Go dispatch), the server's and the engine's tests under the
# race detector, the abuse suite (test/abuse, on its own: it measures latencies), then each
# fuzz target for a short time.
#
#   bash scripts/test.sh            # everything
#   FUZZTIME=0 bash scripts/test.sh # skip the fuzzing pass
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-4s}

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

echo "== go test"
go test -count=1 $pkgs

# Which SIMD kernel sets the differential tests above compared with the pure-Go twins on
# this CPU, and which they skipped for lack of the instructions (KVASIR_REQUIRE_CPU=avx512
# makes a missing set fail).
echo "== CPU kernel sets tested"
go test -count=1 -v -run '^TestKernelSetCoverage$' ./internal/backend/cpu | grep -E -e '--- (PASS|SKIP|FAIL)|NOT tested|compared with'

echo "== go test (pure-Go kernels, KVASIR_CPU=generic)"
KVASIR_CPU=generic go test -count=1 ./internal/backend/...

# The race detector needs cgo (a C compiler; CI's g++ brings one). TestOpenAINpmClient drives
# a separately built binary, so the detector would not see its server; TestGreedyInvariance
# runs its engine configurations on the synthetic model only, since the real models' runs
# take the same paths and cost ten times as long under the detector. Both ran in full above.
echo "== go test -race (server and engine)"
if [ "$(go env CGO_ENABLED)" = 1 ]; then
	go test -race -count=1 -skip '^TestOpenAINpmClient$' ./internal/server
	go test -race -count=1 -skip '^TestGreedyInvariance$/^stories260K' ./internal/engine
elif [ "${KVASIR_REQUIRE_TESTDATA:-}" = 1 ]; then
	echo "the race detector needs cgo: no C compiler (CGO_ENABLED=$(go env CGO_ENABLED))"; exit 1
else
	echo "no cgo (no C compiler): the race run is not done here (CI installs g++ and runs it)"
fi

echo "== abuse suite (test/abuse)"
go test -count=1 ./test/abuse

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
echo "== all tests passed"
