package quantize

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// GPTQ (Frantar et al., 2022) quantizes a linear layer's weight matrix W one input column
// at a time and, after each column, spreads that column's rounding error over the columns
// not yet quantized, in the proportions that least change the layer's outputs on the
// calibration inputs X. The proportions come from the Hessian of the output error,
// H = 2 X^T X: with U the upper Cholesky factor of H^-1, the error e of column i (divided
// by U[i][i]) is subtracted from each later column j times U[i][j]. The updates are applied
// lazily, a block of columns at a time, as the paper's fast variant does.
//
// The grid is the GGUF block type's: when quantization reaches the first column of a
// block (QK consecutive columns of a row; for the k-quants the super-block of QKK), the
// block's scales are chosen from the weights as they are then, error updates included;
// each column is then rounded onto that grid.
// With act-order, columns go in order of decreasing H[i][i] (the inputs with the most
// energy first); as a block's columns are then scattered in time, its scale is chosen once
// from the original weights ("static groups").

// GPTQOptions tunes GPTQ.
type GPTQOptions struct {
	Damp      float64 // fraction of the mean diagonal added to H's diagonal (0: 0.01)
	BlockSize int     // columns per lazy update (0: 128)
	ActOrder  bool
	// Weighted weighs the grids' scale searches by GPTQ's error weights 1/U[i][i]^2.
	Weighted bool
	// Regrid runs GPTQ twice, the second time on grids chosen from the weights the first
	// rounded (see GPTQ).
	Regrid bool
	// AutoDamp makes Quantize choose Damp from DampGrid by the perplexity of held-out
	// calibration windows (ChooseDamp) instead of taking it as given.
	AutoDamp bool
}

// Hessian returns H = 2/n X^T X of the n rows of x, [cols][cols] in float64.
func Hessian(p *cpu.Pool, x *calibrate.Dense) ([]float64, error) {
	n, c := x.Rows, x.Cols
	xt := &calibrate.Dense{Rows: c, Cols: n, Data: make([]float32, n*c)}
	for t := range n {
		row := x.Row(t)
		for j, v := range row {
			xt.Data[j*n+t] = v
		}
	}
	out := make([]float32, c*c)
	if err := calibrate.MatMul(p, out, xt, xt.Data, c); err != nil {
		return nil, err
	}
	h := make([]float64, c*c)
	for i, v := range out {
		h[i] = 2 * float64(v) / float64(n)
	}
	return h, nil
}

// Prepared is a Hessian made ready for GPTQ: dampened, in processing order, and factored.
// The linear layers that read one input (q, k and v) share it.
type Prepared struct {
	cols int
	perm []int     // processing order of the columns
	dead []bool    // columns whose input is always 0
	u    []float64 // upper Cholesky factor of the inverse of the permuted, dampened H
	opt  GPTQOptions
}

// Prepare dampens h (cols x cols), orders its columns (act-order) and factors its inverse.
func Prepare(h []float64, cols int, opt GPTQOptions) (*Prepared, error) {
	if len(h) != cols*cols {
		return nil, fmt.Errorf("gptq: Hessian of %d values for %d columns", len(h), cols)
	}
	if opt.Damp <= 0 {
		opt.Damp = 0.01
	}
	if opt.BlockSize <= 0 {
		opt.BlockSize = 128
	}
	H := append([]float64(nil), h...)
	p := &Prepared{cols: cols, perm: make([]int, cols), dead: make([]bool, cols), opt: opt}
	// Inputs that never fire carry no information: their weights are free (set to 0).
	for i := range cols {
		if H[i*cols+i] == 0 {
			H[i*cols+i] = 1
			p.dead[i] = true
		}
	}
	for i := range p.perm {
		p.perm[i] = i
	}
	if opt.ActOrder {
		sort.SliceStable(p.perm, func(a, b int) bool { return H[p.perm[a]*cols+p.perm[a]] > H[p.perm[b]*cols+p.perm[b]] })
	}
	Hp := make([]float64, cols*cols)
	var meanDiag float64
	for i, a := range p.perm {
		for j, b := range p.perm {
			Hp[i*cols+j] = H[a*cols+b]
		}
		meanDiag += H[a*cols+a]
	}
	meanDiag /= float64(cols)
	for i := range cols {
		Hp[i*cols+i] += opt.Damp * meanDiag
	}
	var err error
	if p.u, err = InverseCholeskyUpper(Hp, cols); err != nil {
		return nil, fmt.Errorf("gptq: %w", err)
	}
	return p, nil
}

// GPTQTypes lists the grids GPTQ quantizes onto.
var GPTQTypes = []quant.Type{quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K}

// HasGPTQ reports whether GPTQ can quantize onto t's grid.
func HasGPTQ(t quant.Type) bool { return quant.HasGrid(t) || quant.HasSuperGrid(t) }

// blockGrid is the grid of one block of a row: a legacy type's block of QK values or a
// k-quant's super-block of QKK; i is an element's index within the block.
type blockGrid interface {
	Level(i int, v float32) int
	Value(i, L int) float32
	Pack(levels []int, dst []byte)
}

// legacyGrid is a quant.Grid, whose levels do not depend on the element.
type legacyGrid struct{ quant.Grid }

func (g legacyGrid) Level(_ int, v float32) int { return g.Grid.Level(v) }
func (g legacyGrid) Value(_, L int) float32     { return g.Grid.Value(L) }

// newBlockGrid chooses the grid of one block x of type t from its values as they are,
// each element's error weighed by importance (nil: the type's own weighting).
func newBlockGrid(t quant.Type, x, importance []float32) (blockGrid, error) {
	if quant.HasSuperGrid(t) {
		g, err := quant.NewSuperGrid(t, x, importance)
		return &g, err
	}
	g, err := quant.NewGrid(t, x, importance)
	return legacyGrid{g}, err
}

// GPTQ quantizes w (rows of w.Cols values) onto grid type t with the prepared Hessian of
// its inputs, replaces w's values by their quantized ones and returns the encoded rows.
// On a k-quant grid the block whose scales are chosen at its first column is the
// super-block: its sub-blocks' scales and mins (and the super-block's scales of them)
// come from the 256 weights as the error updates have left them, and (without
// act-order) each later sub-block's scale and min are refitted when GPTQ reaches it.
//
// With the prepared options' Weighted, every scale search weighs column i's rounding
// error by 1/U[i][i]^2, what an error there adds to the layer's output error once the
// later columns have compensated it (GPTQ's own measure), instead of by the weight's
// magnitude. With Regrid, GPTQ runs twice: the second pass fixes every block's grid
// beforehand, chosen by the type's full scale search from the weights the first pass
// actually rounded (the error-compensated ones, whole super-blocks of them: a k-quant's
// f16 super-block scales then fit its later sub-blocks too), and otherwise quantizes as
// the first did.
func GPTQ(w *calibrate.Dense, p *Prepared, t quant.Type) ([]byte, error) {
	if !HasGPTQ(t) {
		return nil, fmt.Errorf("gptq: %s has no grid here (GPTQ supports q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k)", t)
	}
	rows, cols := w.Rows, w.Cols
	blk := t.BlockSize()
	if cols%blk != 0 {
		return nil, fmt.Errorf("gptq: %s: %d columns are not whole blocks of %d", w.Name, cols, blk)
	}
	if cols != p.cols {
		return nil, fmt.Errorf("gptq: %s: %d columns, Hessian of %d", w.Name, cols, p.cols)
	}
	var imp []float32 // per original column; nil without Weighted
	if p.opt.Weighted {
		imp = make([]float32, cols)
		for i, c := range p.perm {
			if d := p.u[i*cols+i]; d > 0 && !p.dead[c] {
				imp[c] = float32(1 / (d * d))
			}
		}
	}
	var seen []float64
	if p.opt.Regrid {
		seen = make([]float64, rows*cols)
	}
	levels, grids, err := gptqPass(w, p, t, imp, nil, seen)
	if err != nil {
		return nil, err
	}
	if p.opt.Regrid {
		nb := cols / blk
		fixed := make([]blockGrid, rows*nb)
		x := make([]float32, blk)
		for r := range rows {
			for b := range nb {
				for j := range x {
					x[j] = float32(seen[r*cols+b*blk+j])
				}
				var bi []float32
				if imp != nil {
					bi = imp[b*blk : (b+1)*blk]
				}
				if fixed[r*nb+b], err = newBlockGrid(t, x, bi); err != nil {
					return nil, err
				}
			}
		}
		if levels, grids, err = gptqPass(w, p, t, imp, fixed, nil); err != nil {
			return nil, err
		}
	}
	rb, _ := t.RowBytes(cols)
	out := make([]byte, rows*rb)
	bb := t.BlockBytes()
	nb := cols / blk
	for r := range rows {
		for b := range nb {
			g := grids[r*nb+b]
			ls := levels[r*cols+b*blk:][:blk]
			g.Pack(ls, out[r*rb+b*bb:])
			for j, L := range ls {
				w.Data[r*cols+b*blk+j] = g.Value(j, L)
			}
		}
	}
	return out, nil
}

// gptqPass is one GPTQ pass over w (left unchanged): it returns each weight's level (in
// the original column order) and each row's block grids. imp weighs the scale searches
// (nil: unweighted). With fixed, the block grids are those (refitted in place where the
// pass refits sub-blocks); without, they are chosen as GPTQ describes. seen, if not nil,
// receives each weight's value when it was rounded.
func gptqPass(w *calibrate.Dense, p *Prepared, t quant.Type, imp []float32, fixed []blockGrid, seen []float64) ([]int, []blockGrid, error) {
	rows, cols := w.Rows, w.Cols
	blk := t.BlockSize()
	perm, U, bs, actOrder := p.perm, p.u, p.opt.BlockSize, p.opt.ActOrder
	// A block's grid is chosen from weights that every earlier column has updated: the
	// blocks must not straddle the lazy updates' boundaries.
	if bs%blk != 0 && blk%bs != 0 {
		bs = (bs + blk - 1) / blk * blk
	}
	W := make([]float64, rows*cols)
	for i, v := range w.Data {
		if !p.dead[i%cols] {
			W[i] = float64(v)
		}
	}
	impOf := func(c, n int) []float32 {
		if imp == nil {
			return nil
		}
		return imp[c : c+n]
	}
	// Grids: per row and block. Given, or static (from the original weights) with
	// act-order, or chosen when GPTQ reaches each block.
	nb := cols / blk
	grids := fixed
	x := make([]float32, blk)
	if grids == nil {
		grids = make([]blockGrid, rows*nb)
		if actOrder {
			for r := range rows {
				for b := range nb {
					for j := range x {
						x[j] = float32(W[r*cols+b*blk+j])
					}
					g, err := newBlockGrid(t, x, impOf(b*blk, blk))
					if err != nil {
						return nil, nil, err
					}
					grids[r*nb+b] = g
				}
			}
		}
	}
	// The grids are chosen as the columns are reached: in order, without act-order or
	// given grids.
	lazy := fixed == nil && !actOrder
	// W's columns in processing order.
	Wp := make([]float64, rows*cols)
	for r := range rows {
		for i, c := range perm {
			Wp[r*cols+i] = W[r*cols+c]
		}
	}
	levels := make([]int, rows*cols) // original column order
	errs := make([]float64, rows*bs)
	for i1 := 0; i1 < cols; i1 += bs {
		i2 := min(i1+bs, cols)
		for i := i1; i < i2; i++ {
			c := perm[i]
			d := U[i*cols+i]
			for r := range rows {
				if lazy && c%blk == 0 {
					// The first column of a block: its grid from the weights as they are now
					// (without act-order columns go in order, so the block's columns are
					// those of Wp at i..i+blk).
					for j := range x {
						x[j] = float32(Wp[r*cols+i+j])
					}
					g, err := newBlockGrid(t, x, impOf(c, blk))
					if err != nil {
						return nil, nil, err
					}
					grids[r*nb+c/blk] = g
				}
				g := grids[r*nb+c/blk]
				if sg, ok := g.(*quant.SuperGrid); ok && !actOrder && c%sg.Sub == 0 && (c%blk != 0 || !lazy) {
					// A sub-block (a later one, when the grid was just chosen): its scale and
					// min refitted to its weights as the updates have left them (the
					// super-block's scales of them kept).
					for j := range sg.Sub {
						x[j] = float32(Wp[r*cols+i+j])
					}
					sg.Refit(c%blk/sg.Sub, x[:sg.Sub], impOf(c, sg.Sub))
				}
				v := Wp[r*cols+i]
				if seen != nil {
					seen[r*cols+c] = v
				}
				L := g.Level(c%blk, float32(v))
				levels[r*cols+c] = L
				q := float64(g.Value(c%blk, L))
				e := (v - q) / d
				errs[r*bs+(i-i1)] = e
				row := Wp[r*cols:]
				for j := i + 1; j < i2; j++ {
					row[j] -= e * U[i*cols+j]
				}
			}
		}
		// Lazy update of the columns after the block.
		for r := range rows {
			row := Wp[r*cols:]
			for i := i1; i < i2; i++ {
				e := errs[r*bs+(i-i1)]
				if e == 0 {
					continue
				}
				u := U[i*cols:]
				for j := i2; j < cols; j++ {
					row[j] -= e * u[j]
				}
			}
		}
	}
	return levels, grids, nil
}

// InverseCholeskyUpper returns the upper triangular U with U^T U = A^-1 for the symmetric
// positive definite n x n matrix A (row-major), as GPTQ uses it: the Cholesky factor of
// the inverse, from which column i's error propagates to the later columns.
func InverseCholeskyUpper(a []float64, n int) ([]float64, error) {
	L, err := cholesky(a, n)
	if err != nil {
		return nil, err
	}
	// A^-1 = L^-T L^-1. Invert L (lower triangular) by forward substitution.
	Li := make([]float64, n*n)
	for i := range n {
		Li[i*n+i] = 1 / L[i*n+i]
		for j := 0; j < i; j++ {
			var s float64
			for k := j; k < i; k++ {
				s += L[i*n+k] * Li[k*n+j]
			}
			Li[i*n+j] = -s / L[i*n+i]
		}
	}
	inv := make([]float64, n*n) // Li^T Li
	for i := range n {
		for j := i; j < n; j++ {
			var s float64
			for k := j; k < n; k++ {
				s += Li[k*n+i] * Li[k*n+j]
			}
			inv[i*n+j], inv[j*n+i] = s, s
		}
	}
	L2, err := cholesky(inv, n)
	if err != nil {
		return nil, err
	}
	U := make([]float64, n*n) // L2^T
	for i := range n {
		for j := 0; j <= i; j++ {
			U[j*n+i] = L2[i*n+j]
		}
	}
	return U, nil
}

// errIndefinite is the error of a Hessian that is not positive definite.
var errIndefinite = errors.New("the Hessian is not positive definite")

// cholesky returns the lower triangular L with L L^T = a.
func cholesky(a []float64, n int) ([]float64, error) {
	L := make([]float64, n*n)
	for i := range n {
		for j := 0; j <= i; j++ {
			s := a[i*n+j]
			for k := range j {
				s -= L[i*n+k] * L[j*n+k]
			}
			if i == j {
				if s <= 0 || math.IsNaN(s) {
					return nil, fmt.Errorf("%w (pivot %d is %g): more calibration tokens or a larger damping", errIndefinite, i, s)
				}
				L[i*n+i] = math.Sqrt(s)
			} else {
				L[i*n+j] = s / L[j*n+j]
			}
		}
	}
	return L, nil
}
