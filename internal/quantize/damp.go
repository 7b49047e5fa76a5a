package quantize

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// DampGrid lists the dampings ChooseDamp picks from, as fractions of the Hessian's mean
// diagonal: half-decade steps around the GPTQ paper's 0.01.
var DampGrid = []float64{0.001, 0.003, 0.01, 0.03, 0.1, 0.3}

// heldOutEvery is the share of the calibration windows ChooseDamp holds out: every
// heldOutEvery-th window (the last of each run of that many).
const heldOutEvery = 4

// ChooseDamp picks GPTQ's damping for one stage on the calibration data alone. The
// stage's calibration windows are split into fit windows and held-out ones (every fourth);
// for each damping of DampGrid, the stage's linear layers are quantized by GPTQ onto
// their types with the Hessian of the fit windows, and the change in the layers' outputs
// on the held-out windows, sum of ||(Q - W) x||^2, is measured. It returns the damping with
// the least held-out change and the changes, one per damping of DampGrid. The stage's
// weights are left as they are.
func ChooseDamp(p *cpu.Pool, s *calibrate.Stage, types []quant.Type, opt GPTQOptions) (float64, []float64, error) {
	if len(types) != len(s.Linear) {
		return 0, nil, fmt.Errorf("gptq: %d types for %d linear layers", len(types), len(s.Linear))
	}
	fit, held, err := splitWindows(s)
	if err != nil {
		return 0, nil, err
	}
	h, err := Hessian(p, fit)
	if err != nil {
		return 0, nil, err
	}
	errs := make([]float64, len(DampGrid))
	best := -1
	for k, damp := range DampGrid {
		o := opt
		o.Damp = damp
		prep, err := Prepare(h, fit.Cols, o)
		if err != nil {
			errs[k] = math.Inf(1) // too little damping for the fit windows' Hessian
			continue
		}
		for i, w := range s.Linear {
			if !HasGPTQ(types[i]) {
				continue
			}
			q := &calibrate.Dense{Name: w.Name, Rows: w.Rows, Cols: w.Cols, Data: append([]float32(nil), w.Data...)}
			if _, err := GPTQ(q, prep, types[i]); err != nil {
				return 0, nil, err
			}
			for j, v := range w.Data {
				q.Data[j] -= v
			}
			out := make([]float32, held.Rows*w.Rows)
			if err := calibrate.MatMul(p, out, q, held.Data, held.Rows); err != nil {
				return 0, nil, err
			}
			for _, v := range out {
				errs[k] += float64(v) * float64(v)
			}
		}
		if best < 0 || errs[k] < errs[best] {
			best = k
		}
	}
	if best < 0 {
		return 0, nil, fmt.Errorf("gptq: layer %d %s: the fit windows' Hessian is not positive definite at any damping of %v: more calibration tokens", s.Layer, s.Kind, DampGrid)
	}
	return DampGrid[best], errs, nil
}

// splitWindows returns the rows of the stage's fit windows and of its held-out windows.
func splitWindows(s *calibrate.Stage) (fit, held *calibrate.Dense, err error) {
	if s.SeqLen <= 0 || s.Tokens%s.SeqLen != 0 {
		return nil, nil, fmt.Errorf("gptq: layer %d %s: %d calibration rows are not whole windows of %d", s.Layer, s.Kind, s.Tokens, s.SeqLen)
	}
	windows := s.Tokens / s.SeqLen
	if windows < 2 {
		return nil, nil, fmt.Errorf("gptq: choosing the damping needs at least 2 calibration windows (there is %d of %d tokens): more calibration text or a fixed --damp", windows, s.SeqLen)
	}
	cols := s.Input.Cols
	fit, held = &calibrate.Dense{Cols: cols}, &calibrate.Dense{Cols: cols}
	for w := range windows {
		d := fit
		// With fewer than heldOutEvery windows, the last one is held out.
		if w%heldOutEvery == heldOutEvery-1 || (windows < heldOutEvery && w == windows-1) {
			d = held
		}
		d.Data = append(d.Data, s.Input.Data[w*s.SeqLen*cols:(w+1)*s.SeqLen*cols]...)
		d.Rows += s.SeqLen
	}
	return fit, held, nil
}
