package train

import "math"

// AdamW holds the hyperparameters of Adam with decoupled weight decay (Loshchilov &
// Hutter), the learning-rate schedule and gradient clipping.
type AdamW struct {
	LR          float64 // peak learning rate
	MinLR       float64 // learning rate at the end of the cosine decay
	Warmup      int     // steps of linear warmup from 0 to LR
	Steps       int     // total steps: the cosine decays from LR at Warmup to MinLR at Steps
	Beta1       float64 // 0.9
	Beta2       float64 // 0.95
	Eps         float64 // 1e-8
	WeightDecay float64 // applied to matrices, not to norm gains
	Clip        float64 // clip the gradients' global L2 norm to this (0: no clipping)
}

// Rate returns the learning rate of step (0-based): linear warmup, then cosine decay.
func (o AdamW) Rate(step int) float64 {
	if step < o.Warmup {
		return o.LR * float64(step+1) / float64(o.Warmup)
	}
	if step >= o.Steps {
		return o.MinLR
	}
	frac := float64(step-o.Warmup) / float64(max(o.Steps-o.Warmup, 1))
	return o.MinLR + 0.5*(o.LR-o.MinLR)*(1+math.Cos(math.Pi*frac))
}

// adamState is the optimizer's per-weight state: the first and second moment estimates.
type adamState struct {
	m, v [][]float32 // one slice per Param, in Params order
}

func newAdamState(ps []Param) *adamState {
	s := &adamState{}
	for _, p := range ps {
		s.m = append(s.m, make([]float32, len(p.W)))
		s.v = append(s.v, make([]float32, len(p.W)))
	}
	return s
}

// gradNorm returns the global L2 norm of the gradients.
func gradNorm(gs []Param) float64 {
	var s float64
	for _, g := range gs {
		for _, v := range g.W {
			s += float64(v) * float64(v)
		}
	}
	return math.Sqrt(s)
}

// update applies one AdamW step (step is 0-based) to ps with gradients gs (same order and
// shapes), clipping the gradients first; it returns the gradients' norm before clipping
// and the learning rate used.
func (o AdamW) update(ps, gs []Param, st *adamState, step int) (norm, lr float64) {
	norm = gradNorm(gs)
	scale := 1.0
	if o.Clip > 0 && norm > o.Clip {
		scale = o.Clip / norm
	}
	lr = o.Rate(step)
	t := float64(step + 1)
	c1 := 1 - math.Pow(o.Beta1, t)
	c2 := 1 - math.Pow(o.Beta2, t)
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	for i, p := range ps {
		m, v, g := st.m[i], st.v[i], gs[i].W
		decay := float32(1)
		if p.Decay {
			decay = float32(1 - lr*o.WeightDecay)
		}
		for j := range p.W {
			gj := g[j] * float32(scale)
			m[j] = b1*m[j] + (1-b1)*gj
			v[j] = b2*v[j] + (1-b2)*gj*gj
			mh := float64(m[j]) / c1
			vh := float64(v[j]) / c2
			p.W[j] = p.W[j]*decay - float32(lr*mh/(math.Sqrt(vh)+o.Eps))
		}
	}
	return norm, lr
}
