package engine

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/model"
)

// cpuBackends makes one CPU backend per rank of par, the threads shared among them (at
// least one each; threads < 1: all cores for each), closed when the test or benchmark ends.
func cpuBackends(t testing.TB, threads int, par model.Parallel) []backend.Backend {
	t.Helper()
	n := par.Ranks()
	per := 0
	if threads > 0 {
		per = max(threads/n, 1)
	}
	bes := make([]backend.Backend, n)
	for i := range bes {
		b := cpubackend.New(per)
		t.Cleanup(func() { b.Close() })
		bes[i] = b
	}
	return bes
}
