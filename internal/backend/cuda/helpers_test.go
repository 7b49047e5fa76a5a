package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// env is an opened device with its kernels, cuBLAS handle and ops.
type env struct {
	dev     *Device
	nv      *NVRTC
	ops     *Ops
	cache   CubinCache
	compile time.Duration
}

// gpuDriver returns the CUDA driver and its device count, or skips the test when there is
// no driver or no device (CI has none).
func gpuDriver(t *testing.T) (*Driver, int) {
	t.Helper()
	drv, n, err := Devices()
	if n == 0 {
		t.Skipf("skipping GPU test: no CUDA device (%v)", err)
	}
	return drv, n
}

// newEnv opens device 0 with a fresh cubin cache, or skips the test when no CUDA driver
// or device is present (CI has none). With a device, a missing NVRTC or cuBLAS fails.
func newEnv(t *testing.T) *env {
	t.Helper()
	drv, _ := gpuDriver(t)
	dev, err := drv.OpenDevice(0, DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nv, err := OpenNVRTC()
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	blasLib, err := OpenCuBLAS()
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	e := &env{dev: dev, nv: nv, cache: CubinCache{Dir: t.TempDir()}}
	err = dev.Do(func() error {
		k, err := dev.LoadKernels(nv, e.cache)
		if err != nil {
			return err
		}
		b, err := dev.NewBLAS(blasLib)
		if err != nil {
			return err
		}
		e.ops = &Ops{Dev: dev, Kern: k, BLAS: b}
		e.compile = k.CompileTime
		return e.ops.AllocX8(GEMVMaxRows * 65536)
	})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dev.Do(func() error {
			e.ops.FreeX8()
			dev.FreeBLAS(e.ops.BLAS)
			return dev.FreeKernels(e.ops.Kern)
		})
		dev.Close()
	})
	return e
}

// do runs fn on the device goroutine and fails the test on error.
func (e *env) do(t *testing.T, fn func() error) {
	t.Helper()
	if err := e.dev.Do(fn); err != nil {
		t.Fatal(err)
	}
}

// upload allocates a buffer of dtype t holding vals (rounded to t) and returns it with the
// values as the device holds them. The buffer is freed when the test ends.
func (e *env) upload(t *testing.T, dt DType, vals []float32) (Buffer, []float32) {
	t.Helper()
	held := make([]float32, len(vals))
	var b Buffer
	e.do(t, func() error {
		var err error
		if b, err = e.dev.Alloc(dt, len(vals)); err != nil {
			return err
		}
		switch dt {
		case F32:
			copy(held, vals)
			return Upload(e.dev, b, vals)
		case F16, BF16:
			h := make([]uint16, len(vals))
			for i, v := range vals {
				if dt == F16 {
					h[i] = quant.F32ToF16(v)
					held[i] = quant.F16ToF32(h[i])
				} else {
					h[i] = quant.F32ToBF16(v)
					held[i] = quant.BF16ToF32(h[i])
				}
			}
			return Upload(e.dev, b, h)
		}
		return fmt.Errorf("upload: dtype %s", dt)
	})
	t.Cleanup(func() { e.dev.Do(func() error { return e.dev.Free(b) }) })
	return b, held
}

// uploadI32 allocates and fills an I32 buffer.
func (e *env) uploadI32(t *testing.T, vals []int32) Buffer {
	t.Helper()
	var b Buffer
	e.do(t, func() error {
		var err error
		if b, err = e.dev.Alloc(I32, len(vals)); err != nil {
			return err
		}
		return Upload(e.dev, b, vals)
	})
	t.Cleanup(func() { e.dev.Do(func() error { return e.dev.Free(b) }) })
	return b
}

// poisoned allocates n elements of dt filled with NaN bit patterns, so that unwritten
// outputs fail comparisons.
func (e *env) poisoned(t *testing.T, dt DType, n int) Buffer {
	t.Helper()
	var b Buffer
	e.do(t, func() error {
		var err error
		if b, err = e.dev.Alloc(dt, n+n%2); err != nil {
			return err
		}
		return e.dev.Fill32(b, 0x7fc07fff)
	})
	b.Len = n
	t.Cleanup(func() { e.dev.Do(func() error { return e.dev.Free(b) }) })
	return b
}

// download returns b's values as float32.
func (e *env) download(t *testing.T, b Buffer) []float32 {
	t.Helper()
	out := make([]float32, b.Len)
	e.do(t, func() error {
		switch b.DType {
		case F32:
			return Download(e.dev, out, b)
		case F16, BF16:
			h := make([]uint16, b.Len)
			if err := Download(e.dev, h, b); err != nil {
				return err
			}
			for i, v := range h {
				if b.DType == F16 {
					out[i] = quant.F16ToF32(v)
				} else {
					out[i] = quant.BF16ToF32(v)
				}
			}
			return nil
		}
		return fmt.Errorf("download: dtype %s", b.DType)
	})
	return out
}

// downloadI32 returns an I32 buffer's values.
func (e *env) downloadI32(t *testing.T, b Buffer) []int32 {
	t.Helper()
	out := make([]int32, b.Len)
	e.do(t, func() error { return Download(e.dev, out, b) })
	return out
}

// randVals returns n values uniform in [-scale, scale).
func randVals(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

// relErr returns ||got - want|| / ||want||; NaN anywhere gives +Inf.
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			return math.Inf(1)
		}
		num += (g - w) * (g - w)
		den += w * w
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// tol returns the relative-error bound for results rounded to dt.
func tol(dt DType) float64 {
	switch dt {
	case BF16:
		return 1e-2
	case F16:
		return 2e-3
	}
	return 2e-5
}

// check compares got with want under dt's tolerance and records the result.
func check(t *testing.T, name string, dt DType, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	err := relErr(got, want)
	status := "ok"
	if !(err <= tol(dt)) {
		status = "FAIL"
		t.Errorf("%s: relative error %.3g over %.3g", name, err, tol(dt))
	}
	result(t, "kernel", name, fmt.Sprintf("%.2e", err), fmt.Sprintf("tol %.0e %s", tol(dt), status))
}

// result logs one line of the results table the GPU script collects.
func result(t *testing.T, kind, name, value, detail string) {
	t.Helper()
	t.Logf("RESULT|%s|%s|%s|%s", kind, name, value, strings.ReplaceAll(detail, "|", "/"))
}

// f64 widens a float32 slice.
func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
