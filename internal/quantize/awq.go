package quantize

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// AWQ (Lin et al., 2023) protects the weights that meet large activations. Scaling input
// channel j of a linear layer's weights up by s_j and its input down by s_j leaves the
// layer's output unchanged, but shrinks the relative rounding error of those weights. AWQ
// takes s = m^alpha, m the channels' mean activation magnitude on calibration text, and
// searches alpha in [0, 1] for the least squared error in what the quantized layers feed,
// as AutoAWQ measures it: the attention block's output for q, k and v (over whole
// calibration sequences, o in float), the feed-forward block's for gate and up (down in
// float), the layer's own outputs for o and down. The division of the input is folded
// into whatever produced it:
//
//   - q/k/v and gate/up read an RMSNorm's output: the norm's weight is divided by s;
//   - down reads silu(gate) * up, linear in up: up's output rows are divided by s;
//   - o reads the attention's output, linear in v: v's output rows (and bias) are divided
//     by s. With grouped-query attention a value row feeds KVGroup heads, so the heads of
//     one group share their scales (taken from the group's mean magnitudes).
//
// AWQ's second step (AWQClip), after the scales are folded, clips each block of weights
// to the range that least changes its share of the layer's outputs (on the grids with a
// min, each end of the range apart).
//
// Both steps sum the calibration tokens' squared errors as AutoAWQ does. With
// TokenWeighted they weigh each token's by the stage's TokenWeight instead, 1/ms of the
// residual stream the block's output is added to: what the next RMSNorm leaves of the
// error, so that the few tokens whose residual stream carries tens of times the others'
// energy (each sequence's first) weigh little. (On the trained 24.9M target this did not
// lower held-out perplexity: docs/BENCHMARKS.md.)

// AWQOptions tunes AWQ.
type AWQOptions struct {
	GridPoints int // alphas tried, evenly spaced over [0, 1] (0: 21)
	MaxTokens  int // calibration rows the output error is measured on (0: 1024)
	NoClip     bool
	// NoScales skips the scale search: AWQ leaves the stage as it is and only the
	// clipping search (AWQClip) runs.
	NoScales bool
	// TokenWeighted weighs each token's squared error by the stage's TokenWeight
	// instead of summing them as they are (AutoAWQ's objective).
	TokenWeighted bool
	// SymmetricClip makes the clipping search clamp every block to a range symmetric
	// about 0 (AutoAWQ's), also on the types whose blocks store a min (q4_1, q5_1, q4_k,
	// q5_k), where by default it shrinks the two ends of the block's range apart (see
	// clipRanges).
	SymmetricClip bool
}

// tokenWeights returns the weight of each of s's tokens in AWQ's objectives: s's
// TokenWeight with opt's TokenWeighted, else nil (all 1; also where s has none).
func tokenWeights(s *calibrate.Stage, opt AWQOptions) ([]float32, error) {
	if !opt.TokenWeighted || s.TokenWeight == nil {
		return nil, nil
	}
	w, err := s.TokenWeight()
	if err != nil {
		return nil, fmt.Errorf("awq: token weights: %w", err)
	}
	if len(w) != s.Tokens {
		return nil, fmt.Errorf("awq: %d token weights for %d tokens", len(w), s.Tokens)
	}
	return w, nil
}

// AWQ searches the scales of one stage for its linear layers' target types, folds them
// into the weights and into the stage's norm or producer, rescales its input to match, and
// returns the alpha chosen (0: no scaling did better than none).
func AWQ(p *cpu.Pool, s *calibrate.Stage, types []quant.Type, opt AWQOptions) (float64, error) {
	if opt.GridPoints <= 1 {
		opt.GridPoints = 21
	}
	if opt.MaxTokens <= 0 {
		opt.MaxTokens = 1024
	}
	if len(types) != len(s.Linear) {
		return 0, fmt.Errorf("awq: %d types for %d linear layers", len(types), len(s.Linear))
	}
	if s.Norm == nil && s.Producer == nil {
		return 0, fmt.Errorf("awq: stage %s of layer %d has nothing to fold scales into", s.Kind, s.Layer)
	}
	if opt.NoScales {
		return 0, nil
	}
	tw, err := tokenWeights(s, opt)
	if err != nil {
		return 0, err
	}
	in := s.Input
	cols := in.Cols
	// Mean magnitude per channel, and the channel whose scale each column takes.
	mag := make([]float64, cols)
	for t := range s.Tokens {
		for j, v := range in.Row(t) {
			mag[j] += math.Abs(float64(v))
		}
	}
	owner := make([]int, cols) // the scale index of each column
	nScales := cols
	if s.Producer != nil && s.KVGroup > 1 {
		hd := s.HeadDim
		nScales = cols / s.KVGroup
		for c := range cols {
			owner[c] = (c/hd/s.KVGroup)*hd + c%hd
		}
	} else {
		for c := range owner {
			owner[c] = c
		}
	}
	smag := make([]float64, nScales)
	for c, m := range mag {
		smag[owner[c]] += m / float64(s.Tokens)
	}
	xs, xw := sampleRows(in, s.Tokens, opt.MaxTokens, tw)
	n := xs.Rows
	// sqErr is sum_t w_t |got_t - want_t|^2 over the outputs' rows of width values, w
	// the rows' weights (nil: 1).
	sqErr := func(got, want []float32, width int, w []float32) float64 {
		var total float64
		for t := 0; t*width < len(got); t++ {
			var e float64
			for j := t * width; j < (t+1)*width; j++ {
				d := float64(got[j] - want[j])
				e += d * d
			}
			if w != nil {
				e *= float64(w[t])
			}
			total += e
		}
		return total
	}
	ref := make([][]float32, len(s.Linear))
	for i, w := range s.Linear {
		ref[i] = make([]float32, n*w.Rows)
		if err = calibrate.MatMul(p, ref[i], w, xs.Data, n); err != nil {
			return 0, err
		}
	}
	// On gate and up the error is that of the feed-forward block's output, as AutoAWQ
	// measures it: down(silu(gate x) * up x), down in float.
	mlp := s.Kind == calibrate.FFNInput && s.Down != nil && len(s.Linear) == 2 && isBlockType(types[0]) && isBlockType(types[1])
	ffn := func(gate, up []float32) ([]float32, error) {
		h := make([]float32, len(gate))
		for i, g := range gate {
			h[i] = g / (1 + float32(math.Exp(float64(-g)))) * up[i]
		}
		out := make([]float32, n*s.Down.Rows)
		return out, calibrate.MatMul(p, out, s.Down, h, n)
	}
	var mlpRef []float32
	if mlp {
		var err error
		if mlpRef, err = ffn(ref[0], ref[1]); err != nil {
			return 0, err
		}
	}
	// On q, k and v, that of the attention block's output (o in float), over the first
	// whole sequences.
	attn := s.Kind == calibrate.AttnInput && s.Attention != nil && s.SeqLen > 0 && len(s.Linear) == 3
	for _, t := range types {
		attn = attn && isBlockType(t)
	}
	var xa, xasc []float32
	var attnRef, aw []float32
	if attn {
		rows := max(1, min(s.Tokens, opt.MaxTokens)/s.SeqLen) * s.SeqLen
		xa = in.Data[:rows*cols]
		xasc = make([]float32, len(xa))
		if tw != nil {
			aw = tw[:rows]
		}
		if attnRef, err = s.Attention(xa, s.Linear[0], s.Linear[1], s.Linear[2]); err != nil {
			return 0, err
		}
	}
	// Mean relative weight magnitude per scale index, over the stage's matrices.
	wmag := make([]float64, nScales)
	for _, w := range s.Linear {
		for r := range w.Rows {
			row := w.Row(r)
			for b := 0; b < cols; b += quant.QK {
				var bmax float64
				for _, v := range row[b:min(b+quant.QK, cols)] {
					bmax = max(bmax, math.Abs(float64(v)))
				}
				if bmax == 0 {
					continue
				}
				for j := b; j < min(b+quant.QK, cols); j++ {
					wmag[owner[j]] += math.Abs(float64(row[j])) / bmax
				}
			}
		}
	}
	scales := func(alpha float64, duo bool) []float32 {
		sc := make([]float64, nScales)
		lo, hi := math.Inf(1), 0.0
		for k, m := range smag {
			sc[k] = math.Pow(max(m, 1e-4), alpha)
			if duo {
				sc[k] = max(sc[k]/(math.Pow(wmag[k], 1-alpha)+1e-4), 1e-4)
			}
			lo, hi = min(lo, sc[k]), max(hi, sc[k])
		}
		norm := math.Sqrt(lo * hi)
		out := make([]float32, cols)
		for c := range out {
			out[c] = float32(sc[owner[c]] / norm)
		}
		return out
	}
	q := &calibrate.Dense{}
	xsc := &calibrate.Dense{Rows: n, Cols: cols, Data: make([]float32, n*cols)}
	errorOf := func(sc []float32) (float64, error) {
		for i := range n {
			row, src := xsc.Row(i), xs.Row(i)
			for c, v := range src {
				row[c] = v / sc[c]
			}
		}
		var total float64
		if attn {
			for i, v := range xa {
				xasc[i] = v / sc[i%cols]
			}
			qs := make([]*calibrate.Dense, 3)
			for i, w := range s.Linear {
				qs[i] = &calibrate.Dense{Name: w.Name, Rows: w.Rows, Cols: w.Cols, Data: make([]float32, len(w.Data))}
				for j, v := range w.Data {
					qs[i].Data[j] = v * sc[j%cols]
				}
				if err := quantDequant(types[i], qs[i].Data); err != nil {
					return 0, fmt.Errorf("awq: %s: %w", w.Name, err)
				}
			}
			out, err := s.Attention(xasc, qs[0], qs[1], qs[2])
			if err != nil {
				return 0, err
			}
			return sqErr(out, attnRef, cols, aw), nil
		}
		outs := make([][]float32, len(s.Linear))
		for i, w := range s.Linear {
			if !isBlockType(types[i]) {
				continue // kept wide: the scales change nothing worth measuring
			}
			q.Rows, q.Cols = w.Rows, w.Cols
			q.Data = make([]float32, len(w.Data))
			for j, v := range w.Data {
				q.Data[j] = v * sc[j%cols]
			}
			if err := quantDequant(types[i], q.Data); err != nil {
				return 0, fmt.Errorf("awq: %s: %w", w.Name, err)
			}
			outs[i] = make([]float32, n*w.Rows)
			if err := calibrate.MatMul(p, outs[i], q, xsc.Data, n); err != nil {
				return 0, err
			}
			if !mlp {
				total += sqErr(outs[i], ref[i], w.Rows, xw)
			}
		}
		if mlp {
			out, err := ffn(outs[0], outs[1])
			if err != nil {
				return 0, err
			}
			total += sqErr(out, mlpRef, s.Down.Rows, xw)
		}
		return total, nil
	}
	bestAlpha, bestErr := 0.0, math.Inf(1)
	var best []float32
	for _, duo := range []bool{false, true} {
		for g := range opt.GridPoints {
			alpha := float64(g) / float64(opt.GridPoints-1)
			sc := scales(alpha, duo)
			e, err := errorOf(sc)
			if err != nil {
				return 0, err
			}
			if e < bestErr {
				bestAlpha, bestErr, best = alpha, e, sc
			}
		}
	}
	// Fold: weights' columns up, the producer of the input down, the input down.
	for _, w := range s.Linear {
		for j := range w.Data {
			w.Data[j] *= best[j%cols]
		}
	}
	switch {
	case s.Norm != nil:
		for j := range s.Norm.Data {
			s.Norm.Data[j] /= best[j]
		}
	default:
		div := make([]float32, s.Producer.Rows)
		for c := range cols {
			div[owner[c]] = best[c]
		}
		for r := range s.Producer.Rows {
			row := s.Producer.Row(r)
			for j := range row {
				row[j] /= div[r]
			}
		}
		if b := s.ProducerBias; b != nil {
			for r := range b.Data {
				b.Data[r] /= div[r]
			}
		}
	}
	for t := range s.Tokens {
		row := in.Row(t)
		for c := range row {
			row[c] /= best[c]
		}
	}
	return bestAlpha, nil
}

// clipShrinks are the fractions of a block's largest magnitude AWQClip clamps to:
// 1, 0.95, ... 0.5 (AutoAWQ's grid).
var clipShrinks = func() []float32 {
	var f []float32
	for i := range 11 {
		f = append(f, 1-float32(i)/20)
	}
	return f
}()

// clipRange is one range AWQClip tries on a block: [-lo a, hi a], a the block's largest
// magnitude, or with ends [-lo n, hi p], n and p its largest magnitudes below and above 0.
type clipRange struct {
	lo, hi float32
	ends   bool
}

// clipRanges returns the ranges AWQClip tries on blocks of t, the unclipped one first:
// the symmetric ranges of clipShrinks (AutoAWQ's) or, with ends on a type whose blocks
// store an offset besides the scale (q4_1, q5_1, q4_k, q5_k: the grid spans the block's
// own minimum to its maximum, not -a to a), every pair of clipShrinks for the two ends,
// each end shrunk toward 0 apart.
func clipRanges(t quant.Type, ends bool) []clipRange {
	var rs []clipRange
	if !ends || !hasMin(t) {
		for _, f := range clipShrinks {
			rs = append(rs, clipRange{lo: f, hi: f})
		}
		return rs
	}
	for _, lo := range clipShrinks {
		for _, hi := range clipShrinks {
			rs = append(rs, clipRange{lo: lo, hi: hi, ends: true})
		}
	}
	return rs
}

// hasMin reports whether t is one of the 4- and 5-bit types whose blocks store an offset (a
// min) besides the scale: q4_1, q5_1, q4_k, q5_k (Q2_K's sub-blocks have mins too, but the
// two-ended search was not measured on it and it keeps the symmetric one).
func hasMin(t quant.Type) bool {
	switch t {
	case quant.Q4_1, quant.Q5_1, quant.Q4_K, quant.Q5_K:
		return true
	}
	return false
}

// AWQClip is AWQ's clipping step, run on a stage after AWQ has folded its scales: for each
// row and block of QK columns of the stage's linear layers (all but q and k, whose errors
// meet in the attention scores, as AutoAWQ leaves them), the weights are clamped to
// [-f a, f a], a the block's largest magnitude, with the f of clipShrinks (on a grid
// with a min, unless opt.SymmetricClip, to the range of clipRanges) whose quantized
// weights change the block's share of the outputs least on the calibration inputs:
// d^T H d, d the block's rounding error and H its inputs' second moments. It returns the
// fraction of blocks clipped.
func AWQClip(p *cpu.Pool, s *calibrate.Stage, types []quant.Type, opt AWQOptions) (float64, error) {
	if opt.MaxTokens <= 0 {
		opt.MaxTokens = 1024
	}
	if len(types) != len(s.Linear) {
		return 0, fmt.Errorf("awq: %d types for %d linear layers", len(types), len(s.Linear))
	}
	in, cols := s.Input, s.Input.Cols
	if cols%quant.QK != 0 {
		return 0, nil // no whole blocks to clip
	}
	tw, err := tokenWeights(s, opt)
	if err != nil {
		return 0, err
	}
	xs, xw := sampleRows(in, s.Tokens, opt.MaxTokens, tw)
	if xw != nil {
		// H = sum_t w_t x_t x_t^T: each row scaled by sqrt(w_t).
		for t := range xs.Rows {
			f := float32(math.Sqrt(float64(xw[t])))
			row := xs.Row(t)
			for c := range row {
				row[c] *= f
			}
		}
	}
	h, err := Hessian(p, xs)
	if err != nil {
		return 0, err
	}
	// The diagonal blocks of H, one QK x QK matrix per block of columns.
	nb := cols / quant.QK
	hb := make([]float64, nb*quant.QK*quant.QK)
	for b := range nb {
		for i := range quant.QK {
			copy(hb[(b*quant.QK+i)*quant.QK:][:quant.QK], h[(b*quant.QK+i)*cols+b*quant.QK:][:quant.QK])
		}
	}
	var clipped, blocks int
	for li, w := range s.Linear {
		if !isBlockType(types[li]) || (s.Kind == calibrate.AttnInput && li < 2) {
			continue
		}
		// Each block's largest magnitude, and its largest value on either side of 0.
		amax := make([]float32, w.Rows*nb)
		pos := make([]float32, w.Rows*nb)
		neg := make([]float32, w.Rows*nb)
		for r := range w.Rows {
			for b := range nb {
				k := r*nb + b
				for _, v := range w.Row(r)[b*quant.QK:][:quant.QK] {
					amax[k] = max(amax[k], float32(math.Abs(float64(v))))
					pos[k], neg[k] = max(pos[k], v), max(neg[k], -v)
				}
			}
		}
		ranges := clipRanges(types[li], !opt.SymmetricClip)
		// bounds returns the range candidate k clamps block kb to.
		bounds := func(k, kb int) (lo, hi float32) {
			r := ranges[k]
			if r.ends {
				return -r.lo * neg[kb], r.hi * pos[kb]
			}
			return -r.lo * amax[kb], r.hi * amax[kb]
		}
		best := make([]float64, w.Rows*nb)
		choice := make([]int, w.Rows*nb)
		c := make([]float32, len(w.Data))
		for k := range ranges {
			for i, v := range w.Data {
				lo, hi := bounds(k, i/quant.QK)
				c[i] = min(max(v, lo), hi)
			}
			if err := quantDequant(types[li], c); err != nil {
				return 0, fmt.Errorf("awq: %s: %w", w.Name, err)
			}
			p.Run(w.Rows, func(start, end int) {
				var d [quant.QK]float64
				for r := start; r < end; r++ {
					for b := range nb {
						o := r*cols + b*quant.QK
						for j := range d {
							d[j] = float64(w.Data[o+j] - c[o+j])
						}
						H := hb[b*quant.QK*quant.QK:]
						var e float64
						for i, di := range d {
							var hi float64
							for j, dj := range d {
								hi += H[i*quant.QK+j] * dj
							}
							e += di * hi
						}
						if k == 0 || e < best[r*nb+b] {
							best[r*nb+b], choice[r*nb+b] = e, k
						}
					}
				}
			})
		}
		for i := range w.Data {
			lo, hi := bounds(choice[i/quant.QK], i/quant.QK)
			w.Data[i] = min(max(w.Data[i], lo), hi)
		}
		for _, k := range choice {
			if k > 0 {
				clipped++
			}
		}
		blocks += len(choice)
	}
	if blocks == 0 {
		return 0, nil
	}
	return float64(clipped) / float64(blocks), nil
}

// sampleRows returns at most maxRows of the first tokens rows of in, spread over them
// with a stride that shares no factor with tokens. An even stride would alias with the
// calibration windows' length (8192 tokens in windows of 512, every 8th row: every BOS row
// taken, at 8 times its share), and the first token of a window, whose feed-forward
// output carries tens of times the energy of the others, would weigh on the error out of
// proportion. It also returns the taken rows' weights, w's entries for them (nil when w
// is nil).
func sampleRows(in *calibrate.Dense, tokens, maxRows int, w []float32) (*calibrate.Dense, []float32) {
	n := min(tokens, maxRows)
	stride := max(1, tokens/n)
	for gcd(stride, tokens) != 1 {
		stride++
	}
	xs := &calibrate.Dense{Rows: n, Cols: in.Cols, Data: make([]float32, n*in.Cols)}
	var xw []float32
	if w != nil {
		xw = make([]float32, n)
	}
	for i := range n {
		t := i * stride % tokens
		copy(xs.Row(i), in.Row(t))
		if w != nil {
			xw[i] = w[t]
		}
	}
	return xs, xw
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// quantDequant rounds x (whole rows of t's blocks) onto t's grid in place.
func quantDequant(t quant.Type, x []float32) error {
	rb, err := t.RowBytes(len(x))
	if err != nil {
		return err
	}
	b := make([]byte, rb)
	if err := quant.Quantize(t, x, b); err != nil {
		return err
	}
	return quant.Dequantize(t, b, x)
}
