package bench

import (
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// ProbeBytes is the buffer the memory bandwidth probe streams: far beyond any last-level
// cache.
const ProbeBytes = 512 << 20

// KernelsOptions is what `kvasir bench kernels` measures: a Rows x Cols weight of each
// type, times one activation row (matrix-vector) and Tokens rows (matrix-matrix).
type KernelsOptions struct {
	Rows, Cols, Tokens int
	Types              []quant.Type
	// Budget is about how long each measurement runs (0: 2 seconds).
	Budget time.Duration
}

// KernelResult is one weight type's figures.
type KernelResult struct {
	Type          string  `json:"type"`
	WeightBytes   int     `json:"weight_bytes"`
	MatVecGBPerS  float64 `json:"matvec_gb_per_s"`
	MatVecRatio   float64 `json:"matvec_bandwidth_ratio"`
	GEMMGFLOPPerS float64 `json:"gemm_gflop_per_s"`
}

// KernelsResult is what `bench kernels --json` prints (its keys in alphabetical order).
type KernelsResult struct {
	Cols        int            `json:"cols"`
	GEMMTokens  int            `json:"gemm_tokens"`
	KernelSet   string         `json:"kernel_set"`
	Kernels     []KernelResult `json:"kernels"`
	ProbeGBPerS float64        `json:"probe_gb_per_s"`
	Rows        int            `json:"rows"`
	Threads     int            `json:"threads"`
}

// Kernels measures the matrix products of o on the pool p beside the memory bandwidth
// probe: each type's matrix-vector GB/s (and its share of the probe) and matrix-matrix
// GFLOP/s, each the best of the runs of o.Budget.
func Kernels(p *cpu.Pool, o KernelsOptions) (KernelsResult, error) {
	if o.Budget <= 0 {
		o.Budget = 2 * time.Second
	}
	res := KernelsResult{Cols: o.Cols, GEMMTokens: o.Tokens, KernelSet: p.KernelSet(), Rows: o.Rows, Threads: p.Threads()}
	if o.Cols <= 0 || o.Cols%256 != 0 || o.Rows <= 0 || o.Tokens <= 0 {
		return res, fmt.Errorf("--rows %d --cols %d --tokens %d: need positive sizes, columns a multiple of 256", o.Rows, o.Cols, o.Tokens)
	}
	res.ProbeGBPerS = cpu.ProbeBandwidth(p, ProbeBytes)
	x := make([]float32, o.Tokens*o.Cols)
	for i := range x {
		x[i] = float32(i%97)/97 - 0.5
	}
	out := make([]float32, o.Tokens*o.Rows)
	for _, t := range o.Types {
		w, err := benchWeight(t, o.Rows, o.Cols)
		if err != nil {
			return res, err
		}
		mv, err := timeMatMul(p, out, w, x, 1, o.Budget)
		if err != nil {
			return res, fmt.Errorf("%s: %w", t, err)
		}
		mm, err := timeMatMul(p, out, w, x, o.Tokens, o.Budget)
		if err != nil {
			return res, fmt.Errorf("%s: %w", t, err)
		}
		gbs := float64(len(w.Data)) / mv.Seconds() / 1e9
		res.Kernels = append(res.Kernels, KernelResult{
			Type: t.String(), WeightBytes: len(w.Data), MatVecGBPerS: gbs, MatVecRatio: gbs / res.ProbeGBPerS,
			GEMMGFLOPPerS: 2 * float64(o.Rows) * float64(o.Cols) * float64(o.Tokens) / mm.Seconds() / 1e9,
		})
	}
	return res, nil
}

// WriteKernels prints the figures as `kvasir bench kernels` does.
func WriteKernels(w io.Writer, r KernelsResult) {
	fmt.Fprintf(w, "bandwidth probe: %.2f GB/s (%d threads, %s kernels)\n", r.ProbeGBPerS, r.Threads, r.KernelSet)
	fmt.Fprintf(w, "%-6s %12s %14s %10s %16s\n", "type", "weight MB", "matvec GB/s", "of probe", fmt.Sprintf("GEMM x%d GFLOP/s", r.GEMMTokens))
	for _, k := range r.Kernels {
		fmt.Fprintf(w, "%-6s %12.1f %14.2f %9.0f%% %16.1f\n", k.Type, float64(k.WeightBytes)/1e6, k.MatVecGBPerS, 100*k.MatVecRatio, k.GEMMGFLOPPerS)
	}
}

// benchWeight makes a rows x cols weight of type t: a band of random rows quantized
// properly (valid scales), repeated to fill the matrix.
func benchWeight(t quant.Type, rows, cols int) (cpu.Weight, error) {
	rb, err := t.RowBytes(cols)
	if err != nil {
		return cpu.Weight{}, err
	}
	const band = 16
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([]float32, band*cols)
	for i := range vals {
		vals[i] = float32(r.NormFloat64()) * 0.02
	}
	src := make([]byte, band*rb)
	if err := quant.Quantize(t, vals, src); err != nil {
		return cpu.Weight{}, fmt.Errorf("%s: %w", t, err)
	}
	data := make([]byte, rows*rb)
	for off := 0; off < len(data); off += len(src) {
		copy(data[off:], src)
	}
	return cpu.Weight{Type: t, Rows: rows, Cols: cols, Data: data}, nil
}

// timeMatMul runs MatMul for about budget (at least 3 times after a warm-up) and returns
// the best time of one call.
func timeMatMul(p *cpu.Pool, out []float32, w cpu.Weight, x []float32, n int, budget time.Duration) (time.Duration, error) {
	if err := cpu.MatMul(p, out, w, x, n); err != nil {
		return 0, err
	}
	best := time.Duration(1 << 62)
	start := time.Now()
	iters := 0
	for iters < 3 || time.Since(start) < budget {
		t0 := time.Now()
		if err := cpu.MatMul(p, out, w, x, n); err != nil {
			return 0, err
		}
		best = min(best, time.Since(t0))
		iters++
	}
	return best, nil
}
