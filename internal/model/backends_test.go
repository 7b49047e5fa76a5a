package model

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/backendtest"
)

// cpuBackends makes one CPU backend per rank of par (see backendtest.CPUBackends).
func cpuBackends(t testing.TB, threads int, par Parallel) []backend.Backend {
	t.Helper()
	return backendtest.CPUBackends(t, threads, par.Ranks())
}
