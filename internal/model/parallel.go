package model

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format"
)

// Parallel says how a model is split across ranks, as Megatron-LM splits it.
//
// Tensor parallelism gives each of Tensor ranks a slice of every layer: a contiguous range
// of the attention heads (the rows of q, k and v that produce them and the columns of the
// output projection that read them) and of the MLP's hidden units (rows of gate and up,
// columns of down). Each rank's output projection then yields one term of the layer's
// output, and an all-reduce after the attention and after the MLP sums the terms; between
// the two sums every rank holds the whole residual stream. KV heads are split with the query
// heads that read them, so each rank caches only its own (a rank holds one KV head, a copy,
// when there are fewer KV heads than ranks).
//
// Pipeline parallelism gives each of Pipeline stages consecutive layers; a stage passes the
// residual stream to the next. Ranks are numbered stage-major: rank = stage*Tensor + the
// rank's place in its stage.
type Parallel struct {
	Tensor, Pipeline int
}

// orOne returns p with sizes below 1 read as 1.
func (p Parallel) orOne() Parallel {
	return Parallel{Tensor: max(p.Tensor, 1), Pipeline: max(p.Pipeline, 1)}
}

// Ranks returns the number of ranks: Tensor x Pipeline.
func (p Parallel) Ranks() int {
	p = p.orOne()
	return p.Tensor * p.Pipeline
}

// Check reports whether c can be split as p asks.
func (p Parallel) Check(c format.Config) error {
	if p.Tensor < 1 || p.Pipeline < 1 {
		return fmt.Errorf("parallel: tensor-parallel size %d and pipeline-parallel size %d must be at least 1", p.Tensor, p.Pipeline)
	}
	tp := p.Tensor
	if c.Heads%tp != 0 {
		return fmt.Errorf("parallel: %d attention heads do not split over tensor-parallel size %d", c.Heads, tp)
	}
	if c.KVHeads%tp != 0 && tp%c.KVHeads != 0 {
		return fmt.Errorf("parallel: %d KV heads do not split over tensor-parallel size %d (nor does %d divide it)", c.KVHeads, tp, c.KVHeads)
	}
	for _, w := range []struct {
		what string
		n    int
	}{{"feed-forward size", c.FFNDim}, {"expert feed-forward size", c.ExpertFFNDim}, {"shared expert size", c.SharedExpertFFN}} {
		if w.n%tp != 0 {
			return fmt.Errorf("parallel: %s %d does not split over tensor-parallel size %d", w.what, w.n, tp)
		}
	}
	if p.Pipeline > c.Layers {
		return fmt.Errorf("parallel: pipeline-parallel size %d exceeds the model's %d layers", p.Pipeline, c.Layers)
	}
	return nil
}

// stageLayers returns the layers [lo, hi) of stage s: consecutive, as even as can be, the
// earlier stages taking one more when they do not divide evenly.
func (p Parallel) stageLayers(layers, s int) (lo, hi int) {
	per, extra := layers/p.Pipeline, layers%p.Pipeline
	lo = s*per + min(s, extra)
	hi = lo + per
	if s < extra {
		hi++
	}
	return lo, hi
}

// rankConfig returns the config of the part rank (stage, t) holds: its heads, KV heads,
// MLP widths and layers.
func (p Parallel) rankConfig(c format.Config, stage int) format.Config {
	tp := p.Tensor
	lo, hi := p.stageLayers(c.Layers, stage)
	c.Layers = hi - lo
	c.LeadingDenseLayers = min(max(c.LeadingDenseLayers-lo, 0), c.Layers)
	c.Heads /= tp
	c.KVHeads = max(c.KVHeads/tp, 1)
	c.FFNDim /= tp
	c.ExpertFFNDim /= tp
	c.SharedExpertFFN /= tp
	return c
}

// part is the tensors one rank holds: slices of the model's, renamed for the rank's own
// layer numbers. It is a source for bindWeights.
type part struct {
	tensors map[string]*format.Tensor
}

// Tensor returns the part's tensor called name.
func (p *part) Tensor(name string) (*format.Tensor, bool) {
	t, ok := p.tensors[name]
	return t, ok
}

// layerName matches a layer's tensor name: "blk.<layer>.<rest>"; expertName the rest of
// one unstacked expert's matrix: "ffn_<gate|up|down>.<expert>.weight".
var (
	layerName  = regexp.MustCompile(`^blk\.(\d+)\.(.+)$`)
	expertName = regexp.MustCompile(`^ffn_(gate|up|down)\.\d+\.weight$`)
)

// split is how one tensor is divided among the ranks of a stage.
type split int

const (
	replicate split = iota // every rank holds all of it
	byRows                 // each rank holds a range of each matrix's rows (output features)
	byCols                 // each rank holds a range of every row's columns (input features)
)

// splitOf returns how the layer tensor called rest ("attn_q.weight", "ffn_down_exps.weight",
// ...) is divided, and the width of one unit of the split: a head's rows or columns, or one
// hidden unit of an MLP. KV projections split by KV head are marked by kv.
func splitOf(rest string, c format.Config) (how split, unit int, kv bool) {
	if c.QKNormFull {
		// A norm over the whole projection has a weight per q (or k) row: each rank takes
		// its heads' part.
		switch rest {
		case "attn_q_norm.weight":
			return byRows, c.HeadDim, false
		case "attn_k_norm.weight":
			return byRows, c.HeadDim, true
		}
	}
	// A factorized matrix (lowrank.go) splits as its product would: B by rows when the
	// matrix splits by rows, A by columns when it splits by columns; the other is whole.
	if base, ok := strings.CutSuffix(rest, format.LowRankB); ok {
		if how, unit, kv := splitOf(base+".weight", c); how == byRows {
			return how, unit, kv
		}
		return replicate, 0, false
	}
	if base, ok := strings.CutSuffix(rest, format.LowRankA); ok {
		if how, unit, kv := splitOf(base+".weight", c); how == byCols {
			return how, unit, kv
		}
		return replicate, 0, false
	}
	if c.MLA() {
		// Each rank takes its heads' query rows and rows of attn_kv_b (their keys' and
		// values' up-projections) and their columns of the output; the latent
		// projections and norms, shared by all heads, are whole on every rank.
		switch rest {
		case "attn_q.weight", "attn_q_b.weight":
			return byRows, c.QKNopeDim + c.RopeDim, false
		case "attn_kv_b.weight":
			return byRows, c.QKNopeDim + c.VHeadDim, false
		case "attn_output.weight":
			return byCols, c.VHeadDim, false
		}
	}
	switch rest {
	case "attn_q.weight", "attn_q.bias":
		return byRows, c.HeadDim, false
	case "attn_k.weight", "attn_k.bias", "attn_v.weight", "attn_v.bias":
		return byRows, c.HeadDim, true
	case "attn_output.weight":
		return byCols, c.HeadDim, false
	case "ffn_gate.weight", "ffn_up.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
		"ffn_gate_shexp.weight", "ffn_up_shexp.weight":
		return byRows, 1, false
	case "ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight":
		return byCols, 1, false
	}
	if m := expertName.FindStringSubmatch(rest); m != nil {
		if m[1] == "down" {
			return byCols, 1, false
		}
		return byRows, 1, false
	}
	return replicate, 0, false
}

// rankPart returns the tensors rank (stage, t) of split p holds of m: the embedding on the
// first stage (and on the last when the output is tied to it), the final norm and output
// projection on the last, rotary divisors everywhere, and the stage's layers renumbered
// from 0 with each tensor sliced by splitOf. Row slices share m's data; column slices are
// copies (their rows are not contiguous), so they must fall on the type's block
// boundaries.
func (p Parallel) rankPart(m *format.Model, stage, t int) (*part, error) {
	c := m.Config
	lo, hi := p.stageLayers(c.Layers, stage)
	ends := stageEnds(stage == 0, stage == p.Pipeline-1, c.TiedEmbeddings)
	out := &part{tensors: map[string]*format.Tensor{}}
	for _, ft := range m.Tensors {
		name := ft.Name
		mm := layerName.FindStringSubmatch(name)
		if mm == nil {
			switch name {
			case "token_embd.weight":
				if !ends.embedding {
					continue
				}
			case "output_norm.weight", "output.weight":
				if !ends.output {
					continue
				}
			}
			out.tensors[name] = ft
			continue
		}
		l, _ := strconv.Atoi(mm[1])
		if l < lo || l >= hi {
			continue
		}
		local := fmt.Sprintf("blk.%d.%s", l-lo, mm[2])
		sliced, err := p.slice(ft, mm[2], c, t)
		if err != nil {
			return nil, fmt.Errorf("model %s: tensor %q: %w", m.Path, name, err)
		}
		renamed := *sliced
		renamed.Name = local
		out.tensors[local] = &renamed
	}
	return out, nil
}

// slice returns tensor-parallel rank t's slice of the layer tensor ft (rest is its name
// after "blk.N.").
func (p Parallel) slice(ft *format.Tensor, rest string, c format.Config, t int) (*format.Tensor, error) {
	how, unit, kv := splitOf(rest, c)
	if how == replicate || p.Tensor == 1 {
		return ft, nil
	}
	n := ft.Shape[len(ft.Shape)-1] // columns
	if how == byRows && len(ft.Shape) >= 2 {
		n = ft.Shape[len(ft.Shape)-2]
	}
	units := n / unit
	lo, hi := units/p.Tensor*t, units/p.Tensor*(t+1)
	if kv && c.KVHeads < p.Tensor {
		// Fewer KV heads than ranks: each rank holds the one its query heads read.
		h := t * c.KVHeads / p.Tensor
		lo, hi = h, h+1
	}
	if how == byRows && len(ft.Shape) >= 2 {
		return sliceRows(ft, lo*unit, hi*unit)
	}
	return sliceCols(ft, lo*unit, hi*unit)
}

// matrixShape returns t's matrices (the product of its outer dimensions), rows per matrix
// and columns: a vector is one matrix of one row.
func matrixShape(t *format.Tensor) (matrices, rows, cols int) {
	s := t.Shape
	cols, rows, matrices = s[len(s)-1], 1, 1
	if len(s) >= 2 {
		rows = s[len(s)-2]
	}
	for _, d := range s[:max(len(s)-2, 0)] {
		matrices *= d
	}
	return matrices, rows, cols
}

// sliceRows returns rows [lo, hi) of each matrix of t. A single matrix's rows are
// contiguous, so its slice shares t's data.
func sliceRows(t *format.Tensor, lo, hi int) (*format.Tensor, error) {
	matrices, rows, cols := matrixShape(t)
	rb, err := t.Type.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	if lo < 0 || hi > rows || lo >= hi {
		return nil, fmt.Errorf("rows [%d, %d) outside %d", lo, hi, rows)
	}
	shape := append([]int(nil), t.Shape...)
	shape[len(shape)-2] = hi - lo
	if matrices == 1 {
		return &format.Tensor{Name: t.Name, Type: t.Type, Shape: shape, Data: t.Data[lo*rb : hi*rb]}, nil
	}
	data := make([]byte, 0, matrices*(hi-lo)*rb)
	for e := range matrices {
		data = append(data, t.Data[(e*rows+lo)*rb:(e*rows+hi)*rb]...)
	}
	return &format.Tensor{Name: t.Name, Type: t.Type, Shape: shape, Data: data}, nil
}

// sliceCols returns columns [lo, hi) of every row of t, copied. Both ends must fall on
// block boundaries of t's type.
func sliceCols(t *format.Tensor, lo, hi int) (*format.Tensor, error) {
	matrices, rows, cols := matrixShape(t)
	bs, bb := t.Type.BlockSize(), t.Type.BlockBytes()
	if lo%bs != 0 || hi%bs != 0 {
		return nil, fmt.Errorf("columns [%d, %d) do not fall on the %d-element blocks of %s: choose another tensor-parallel size or weight type", lo, hi, bs, t.Type)
	}
	if lo < 0 || hi > cols || lo >= hi {
		return nil, fmt.Errorf("columns [%d, %d) outside %d", lo, hi, cols)
	}
	rb, err := t.Type.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	// A row header (FP8's per-row scale) goes with every slice of the row.
	h := t.Type.RowHeader()
	from, to := h+lo/bs*bb, h+hi/bs*bb
	data := make([]byte, 0, matrices*rows*(h+to-from))
	for r := range matrices * rows {
		data = append(data, t.Data[r*rb:r*rb+h]...)
		data = append(data, t.Data[r*rb+from:r*rb+to]...)
	}
	shape := append([]int(nil), t.Shape...)
	shape[len(shape)-1] = hi - lo
	return &format.Tensor{Name: t.Name, Type: t.Type, Shape: shape, Data: data}, nil
}
