// Package lowrank factorizes a model's weight matrices into two thinner ones by their
// singular value decomposition and writes the model with the factors in place of the
// matrices, which kvasir then runs as two matmuls.
//
// A matrix W [out][in] with singular values s_1 >= s_2 >= ... is W = U diag(s) Vᵀ. Keeping
// the first r singular triplets gives the best rank-r approximation in the Frobenius and
// spectral norms (Eckart-Young): W ≈ B·A with A = diag(sqrt s_1..r) V_rᵀ [r][in] and
// B = U_r diag(sqrt s_1..r) [out][r], the square roots splitting the scale evenly between
// the two. The rank is given (Rank, capped at min(out, in)) or chosen per matrix as the
// smallest that keeps a share of its energy, sum_{i<=r} s_i^2 >= Energy * sum s_i^2.
//
// The factors are stored as NAME.lr_a.weight (A) and NAME.lr_b.weight (B) in place of
// NAME.weight (format.LowRankA, LowRankB), in the matrix's own element type (F16 for a
// quantized one: quantize after factorizing). Only GGUF
// carries them (llama.cpp does not run such a file; kvasir does). Matrices are factorized one
// at a time: one matrix's float64 copy and decomposition are held at once.
package lowrank

import (
	"fmt"
	"math"
	"regexp"
	"strings"

	"gonum.org/v1/gonum/mat"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// DefaultTensors matches the seven weight matrices of every block.
const DefaultTensors = `^blk\.\d+\.(attn_(q|k|v|output)|ffn_(gate|up|down))\.weight$`

// Options controls Factorize: exactly one of Rank and Energy.
type Options struct {
	Rank   int     // rank of every factorized matrix (capped at the matrix's smaller side)
	Energy float64 // share of each matrix's squared singular values kept, in (0, 1]
	// Tensors selects the matrices by GGUF name (DefaultTensors when nil); only the blocks'
	// seven weight matrices can be factorized.
	Tensors *regexp.Regexp
	// Log, if set, is told what happens, one line at a time.
	Log func(format string, args ...any)
	// TensorDone, if set, is told after each matrix is factorized.
	TensorDone func(done, total int)
	// Progress, if set, is told the bytes of the output written.
	Progress func(done, total int64)
}

// blockMatrix matches the names of the matrices the model can run factorized.
var blockMatrix = regexp.MustCompile(DefaultTensors)

// Result sums up a factorization.
type Result struct {
	Matrices         int   // matrices factorized
	ParamsBefore     int64 // their parameters before
	ParamsAfter      int64 // and after
	MinRank, MaxRank int
}

// Factorize writes m with the selected matrices factorized to out, a .gguf file (through a
// temporary file renamed into place: a failure leaves nothing behind).
func Factorize(m *format.Model, out string, opt Options) (*Result, error) {
	if !strings.HasSuffix(out, ".gguf") {
		return nil, fmt.Errorf("lowrank: the output %q must be a .gguf file (the factors have no Hugging Face names)", out)
	}
	if (opt.Rank > 0) == (opt.Energy > 0) || opt.Rank < 0 || opt.Energy < 0 {
		return nil, fmt.Errorf("lowrank: give a rank >= 1 or an energy in (0, 1], one of them")
	}
	if opt.Energy > 1 || math.IsNaN(opt.Energy) {
		return nil, fmt.Errorf("lowrank: energy %g is outside (0, 1]", opt.Energy)
	}
	sel := opt.Tensors
	if sel == nil {
		sel = blockMatrix
	}
	logf := opt.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if m.Config.Experts > 0 {
		return nil, fmt.Errorf("lowrank: mixture-of-experts models are not supported")
	}
	var chosen []*format.Tensor
	for _, t := range m.Tensors {
		if !sel.MatchString(t.Name) {
			continue
		}
		if !blockMatrix.MatchString(t.Name) {
			return nil, fmt.Errorf("lowrank: tensor %q matches --tensors but is not a block's weight matrix (attn_q/k/v/output, ffn_gate/up/down): the model cannot run it factorized", t.Name)
		}
		if !quant.Supported(t.Type) || len(t.Shape) != 2 {
			return nil, fmt.Errorf("lowrank: tensor %q: type %s, shape %v: cannot factorize it", t.Name, t.Type, t.Shape)
		}
		chosen = append(chosen, t)
	}
	if len(chosen) == 0 {
		return nil, fmt.Errorf("lowrank: no weight matrix matches %q", sel)
	}
	res := &Result{MinRank: math.MaxInt}
	factored := map[string][2]*format.Tensor{}
	for i, t := range chosen {
		a, b, err := factorizeTensor(t, opt)
		if err != nil {
			return nil, err
		}
		factored[t.Name] = [2]*format.Tensor{a, b}
		r := a.Shape[0]
		res.Matrices++
		res.ParamsBefore += int64(t.Elements())
		res.ParamsAfter += int64(a.Elements() + b.Elements())
		res.MinRank, res.MaxRank = min(res.MinRank, r), max(res.MaxRank, r)
		if opt.TensorDone != nil {
			opt.TensorDone(i+1, len(chosen))
		}
	}
	logf("%d matrices factorized at ranks %d..%d: %d parameters become %d (%.1f%%)", res.Matrices, res.MinRank, res.MaxRank,
		res.ParamsBefore, res.ParamsAfter, 100*float64(res.ParamsAfter)/float64(res.ParamsBefore))
	var tensors []*format.Tensor
	for _, t := range m.Tensors {
		if f, ok := factored[t.Name]; ok {
			tensors = append(tensors, f[0], f[1])
			continue
		}
		tensors = append(tensors, t)
	}
	return res, format.Convert(m.WithTensors(tensors), out, format.ConvertOptions{Progress: opt.Progress})
}

// factorizeTensor returns the factors A and B of t, in t's type (F16 for a quantized t).
func factorizeTensor(t *format.Tensor, opt Options) (a, b *format.Tensor, err error) {
	rows, cols := t.Rows()
	vals := make([]float32, rows*cols)
	if err := quant.Dequantize(t.Type, t.Data, vals); err != nil {
		return nil, nil, fmt.Errorf("lowrank: tensor %q: %w", t.Name, err)
	}
	av, bv, r, err := Factor(vals, rows, cols, opt.Rank, opt.Energy)
	if err != nil {
		return nil, nil, fmt.Errorf("lowrank: tensor %q: %w", t.Name, err)
	}
	base := strings.TrimSuffix(t.Name, ".weight")
	if a, err = encode(base+format.LowRankA, t.Type, av, r, cols); err != nil {
		return nil, nil, err
	}
	if b, err = encode(base+format.LowRankB, t.Type, bv, rows, r); err != nil {
		return nil, nil, err
	}
	return a, b, nil
}

// encode encodes rows x cols values as type to when it is F32, F16 or BF16, else (the
// factors of a quantized matrix) as F16.
func encode(name string, to quant.Type, vals []float32, rows, cols int) (*format.Tensor, error) {
	if to != quant.F32 && to != quant.BF16 {
		to = quant.F16
	}
	rb, err := to.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("lowrank: tensor %q: %w", name, err)
	}
	data := make([]byte, rows*rb)
	if err := quant.Quantize(to, vals, data); err != nil {
		return nil, fmt.Errorf("lowrank: tensor %q: %w", name, err)
	}
	return &format.Tensor{Name: name, Type: to, Shape: []int{rows, cols}, Data: data}, nil
}

// Factor returns A [r][cols] and B [rows][r] with B·A the best rank-r approximation of the
// rows x cols matrix w (row-major), r = min(rank, rows, cols) when rank > 0, else the
// smallest rank keeping energy of its squared singular values.
func Factor(w []float32, rows, cols, rank int, energy float64) (a, b []float32, r int, err error) {
	if len(w) != rows*cols || rows <= 0 || cols <= 0 {
		return nil, nil, 0, fmt.Errorf("a %d x %d matrix of %d values", rows, cols, len(w))
	}
	d := make([]float64, len(w))
	for i, v := range w {
		d[i] = float64(v)
	}
	var svd mat.SVD
	if !svd.Factorize(mat.NewDense(rows, cols, d), mat.SVDThin) {
		return nil, nil, 0, fmt.Errorf("the singular value decomposition did not converge")
	}
	s := svd.Values(nil)
	r = Rank(s, rank, energy)
	var u, v mat.Dense
	svd.UTo(&u)
	svd.VTo(&v)
	a = make([]float32, r*cols)
	b = make([]float32, rows*r)
	for k := range r {
		sq := math.Sqrt(s[k])
		for j := range cols {
			a[k*cols+j] = float32(sq * v.At(j, k))
		}
		for i := range rows {
			b[i*r+k] = float32(u.At(i, k) * sq)
		}
	}
	return a, b, r, nil
}

// Rank returns the rank to keep of singular values s (descending): min(rank, len(s)) when
// rank > 0, else the smallest r with sum_{i<r} s_i^2 >= energy * sum s_i^2 (at least 1).
func Rank(s []float64, rank int, energy float64) int {
	if rank > 0 {
		return min(rank, len(s))
	}
	var total float64
	for _, v := range s {
		total += v * v
	}
	var kept float64
	for i, v := range s {
		kept += v * v
		if kept >= energy*total*(1-1e-12) {
			return i + 1
		}
	}
	return len(s)
}
