package cudabackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// The helpers of the op set's GPU tests: the few of package cuda's test helpers they use
// (a test package cannot import another's).

// gpuDriver returns the CUDA driver and its device count, or skips the test when there is
// no driver or no device (CI has none).
func gpuDriver(t *testing.T) (*cuda.Driver, int) {
	t.Helper()
	drv, n, err := cuda.Devices()
	if n == 0 {
		t.Skipf("skipping GPU test: no CUDA device (%v)", err)
	}
	return drv, n
}

// randVals returns n values uniform in [-scale, scale).
func randVals(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

// check compares got with want under dt's tolerance (BF16 1e-2, F16 2e-3, F32 2e-5 of
// relative error; NaN fails) and records the result.
func check(t *testing.T, name string, dt cuda.DType, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	tol := map[cuda.DType]float64{cuda.BF16: 1e-2, cuda.F16: 2e-3}[dt]
	if tol == 0 {
		tol = 2e-5
	}
	var num, den float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			num = math.Inf(1)
			break
		}
		num += (g - w) * (g - w)
		den += w * w
	}
	err := math.Sqrt(num)
	if den != 0 {
		err = math.Sqrt(num / den)
	}
	status := "ok"
	if !(err <= tol) {
		status = "FAIL"
		t.Errorf("%s: relative error %.3g over %.3g", name, err, tol)
	}
	result(t, "kernel", name, fmt.Sprintf("%.2e", err), fmt.Sprintf("tol %.0e %s", tol, status))
}

// result logs one line of the results table the GPU script collects.
func result(t *testing.T, kind, name, value, detail string) {
	t.Helper()
	t.Logf("RESULT|%s|%s|%s|%s", kind, name, value, strings.ReplaceAll(detail, "|", "/"))
}
