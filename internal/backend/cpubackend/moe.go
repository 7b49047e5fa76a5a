package cpubackend

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
)

// RouteExperts picks each token's top experts by softmax probability (computed in
// float64).
func (b *Backend) RouteExperts(ids, gains, logits backend.Tensor, normalize bool) error {
	id, err := indices("route experts", "ids", ids)
	if err != nil {
		return err
	}
	g, err := activation("route experts", "gains", gains)
	if err != nil {
		return err
	}
	lg, err := activation("route experts", "logits", logits)
	if err != nil {
		return err
	}
	n, k, experts := lg.rows(), id.cols(), lg.cols()
	if id.rows() != n || g.rows() != n || g.cols() != k || k > experts {
		return fmt.Errorf("cpu route experts: ids %v and gains %v for logits %v", id.shape, g.shape, lg.shape)
	}
	probs := make([]float64, experts)
	for t := range n {
		for e, v := range lg.f32[t*experts : (t+1)*experts] {
			probs[e] = float64(v)
		}
		softmax64(probs)
		chosen := id.i32[t*k : (t+1)*k]
		var sum float64
		for j := range chosen {
			best := -1
			for e, p := range probs {
				if (best < 0 || p > probs[best]) && !picked(chosen[:j], e) {
					best = e
				}
			}
			chosen[j] = int32(best)
			sum += probs[best]
		}
		for j, e := range chosen {
			p := probs[e]
			if normalize {
				p /= sum
			}
			g.f32[t*k+j] = float32(p)
		}
	}
	return nil
}

// picked reports whether expert e is among chosen.
func picked(chosen []int32, e int) bool {
	for _, c := range chosen {
		if int(c) == e {
			return true
		}
	}
	return false
}

// softmax64 replaces x with softmax(x), stably.
func softmax64(x []float64) {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, v)
	}
	var sum float64
	for i, v := range x {
		x[i] = math.Exp(v - m)
		sum += x[i]
	}
	for i := range x {
		x[i] /= sum
	}
}

// ExpertMLP runs each expert once on the rows of x routed to it and sums the weighted
// outputs into out, expert after expert.
func (b *Backend) ExpertMLP(out, x, ids, gains backend.Tensor, experts []backend.Expert) error {
	const op = "expert mlp"
	o, err := activation(op, "out", out)
	if err != nil {
		return err
	}
	xs, err := activation(op, "x", x)
	if err != nil {
		return err
	}
	id, err := indices(op, "ids", ids)
	if err != nil {
		return err
	}
	g, err := activation(op, "gains", gains)
	if err != nil {
		return err
	}
	n, dim, k := xs.rows(), xs.cols(), id.cols()
	if err := sameShape(op, o, xs); err != nil {
		return err
	}
	if id.rows() != n || g.rows() != n || g.cols() != k {
		return fmt.Errorf("cpu expert mlp: ids %v and gains %v for %d tokens", id.shape, g.shape, n)
	}
	// Group the tokens by expert, in token order.
	tokens := make([][]int, len(experts))
	weights := make([][]float32, len(experts))
	for t := range n {
		for j, e := range id.i32[t*k : (t+1)*k] {
			if e < 0 || int(e) >= len(experts) {
				return fmt.Errorf("cpu expert mlp: token %d: expert %d outside %d", t, e, len(experts))
			}
			tokens[e] = append(tokens[e], t)
			weights[e] = append(weights[e], g.f32[t*k+j])
		}
	}
	clear(o.f32)
	var in, gate, up, res []float32
	for e, toks := range tokens {
		if len(toks) == 0 {
			continue
		}
		ew, err := expertMatrices(experts[e], dim)
		if err != nil {
			return fmt.Errorf("expert %d: %w", e, err)
		}
		m, f := len(toks), ew[0].Rows
		in, gate, up, res = grow(in, m*dim), grow(gate, m*f), grow(up, m*f), grow(res, m*dim)
		for j, t := range toks {
			copy(in[j*dim:(j+1)*dim], xs.f32[t*dim:])
		}
		if err := b.mlp(res, in, gate, up, ew, m); err != nil {
			return fmt.Errorf("expert %d: %w", e, err)
		}
		for j, t := range toks {
			axpy(o.f32[t*dim:(t+1)*dim], weights[e][j], res[j*dim:(j+1)*dim])
		}
	}
	return nil
}

// expertMatrices returns an expert's gate, up and down matrices, checked against each other
// and the model width dim.
func expertMatrices(e backend.Expert, dim int) ([3]cpu.Weight, error) {
	var w [3]cpu.Weight
	var err error
	for i, t := range []backend.Tensor{e.Gate, e.Up, e.Down} {
		if w[i], err = matrix("expert mlp", "expert weight", t); err != nil {
			return w, err
		}
	}
	gate, up, down := w[0], w[1], w[2]
	if gate.Cols != dim || up.Cols != dim || up.Rows != gate.Rows || down.Rows != dim || down.Cols != gate.Rows {
		return w, fmt.Errorf("cpu expert mlp: gate %dx%d, up %dx%d, down %dx%d for width %d",
			gate.Rows, gate.Cols, up.Rows, up.Cols, down.Rows, down.Cols, dim)
	}
	return w, nil
}

// mlp computes out = down(silu(gate·x) * up·x) for m rows of x, using gate and up as
// scratch.
func (b *Backend) mlp(out, x, gate, up []float32, w [3]cpu.Weight, m int) error {
	if err := matMul(b.pool, gate, w[0], x, m); err != nil {
		return err
	}
	if err := matMul(b.pool, up, w[1], x, m); err != nil {
		return err
	}
	if err := cpu.SwiGLU(b.pool, gate, gate, up); err != nil {
		return err
	}
	return matMul(b.pool, out, w[2], gate, m)
}

// GatedAdd adds sigmoid(x[t]·gate) * y[t] into out[t].
func (b *Backend) GatedAdd(out, y, x, gate backend.Tensor) error {
	const op = "gated add"
	o, err := activation(op, "out", out)
	if err != nil {
		return err
	}
	ys, err := activation(op, "y", y)
	if err != nil {
		return err
	}
	xs, err := activation(op, "x", x)
	if err != nil {
		return err
	}
	gs, err := activation(op, "gate", gate)
	if err != nil {
		return err
	}
	if err := sameShape(op, o, ys); err != nil {
		return err
	}
	if xs.rows() != o.rows() || len(gs.f32) != xs.cols() {
		return fmt.Errorf("cpu gated add: x %v and gate of %d for out %v", xs.shape, len(gs.f32), o.shape)
	}
	dim, xd := o.cols(), xs.cols()
	for t := range o.rows() {
		var dot float64
		for i, v := range xs.f32[t*xd : (t+1)*xd] {
			dot += float64(v) * float64(gs.f32[i])
		}
		g := 1 / (1 + float32(math.Exp(-float64(float32(dot)))))
		axpy(o.f32[t*dim:(t+1)*dim], g, ys.f32[t*dim:(t+1)*dim])
	}
	return nil
}

// axpy adds a*x to y.
func axpy(y []float32, a float32, x []float32) {
	for i, v := range x {
		y[i] += a * v
	}
}
