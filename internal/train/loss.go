package train

import (
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
)

// TopK holds a teacher's k largest logits at each position, by descending logit.
type TopK struct {
	K      int
	IDs    []int32   // [positions][K]
	Logits []float32 // [positions][K]
}

// TopKOf returns the k largest entries of each row of logits ([rows][vocab]).
func TopKOf(logits []float32, vocab, k int) TopK {
	rows := len(logits) / vocab
	t := TopK{K: k, IDs: make([]int32, rows*k), Logits: make([]float32, rows*k)}
	for r := 0; r < rows; r++ {
		topKRow(logits[r*vocab:(r+1)*vocab], t.IDs[r*k:(r+1)*k], t.Logits[r*k:(r+1)*k])
	}
	return t
}

// topKRow keeps the k largest values of row in ids/vals, sorted descending (ties: lower
// id first), by insertion into the short sorted list.
func topKRow(row []float32, ids []int32, vals []float32) {
	k, n := len(ids), 0
	for id, v := range row {
		if n == k && v <= vals[k-1] {
			continue
		}
		j := min(n, k-1) // a full list drops its last entry
		for j > 0 && vals[j-1] < v {
			vals[j], ids[j] = vals[j-1], ids[j-1]
			j--
		}
		vals[j], ids[j] = v, int32(id)
		n = min(n+1, k)
	}
}

// LossOptions chooses the training objective.
type LossOptions struct {
	// Alpha weighs the hard-label cross entropy; the distillation term gets 1 - Alpha.
	// 1 trains on hard labels only (no teacher logits needed).
	Alpha float64
	// Temperature T softens both distributions of the distillation term, which is then
	// multiplied by T^2 so its gradients keep their scale (Hinton et al., 2015).
	Temperature float64
}

// lossStats are the summed losses of a batch.
type lossStats struct {
	loss, ce, kl float64 // sums over positions
	n            int
}

// loss computes, for each row of logits ([n][vocab]), the objective
// Alpha * CE(target) + (1 - Alpha) * T^2 * KL(q || p_T), where p_T = softmax(logits / T)
// and q = softmax(teacher top-k logits / T) renormalized over the teacher's top k (zero
// elsewhere), and writes its gradient, averaged over the rows, into dlogits:
// Alpha (softmax(logits) - onehot(target)) + (1 - Alpha) T (p_T - q).
// Row r's soft labels are row teacherRow[r] of teacher, which may be nil when Alpha is 1.
// Rows run in parallel; the sums are taken in row order, so the result does not depend
// on the number of threads.
func loss(pool *cpu.Pool, dlogits, logits []float32, vocab int, targets []int32, teacher *TopK, teacherRow []int, opt LossOptions) lossStats {
	n := len(targets)
	ce, kl := make([]float64, n), make([]float64, n)
	pool.Run(n, func(start, end int) {
		p := make([]float64, vocab)
		for r := start; r < end; r++ {
			row, drow := logits[r*vocab:(r+1)*vocab], dlogits[r*vocab:(r+1)*vocab]
			var tk *topKRowRef
			if opt.Alpha < 1 {
				k := teacher.K
				tk = &topKRowRef{ids: teacher.IDs[teacherRow[r]*k : (teacherRow[r]+1)*k], logits: teacher.Logits[teacherRow[r]*k : (teacherRow[r]+1)*k]}
			}
			ce[r], kl[r] = lossRow(drow, row, targets[r], tk, opt, 1/float64(n), p)
		}
	})
	st := lossStats{n: n}
	for r := range n {
		st.ce += ce[r]
		st.kl += kl[r]
		st.loss += opt.Alpha*ce[r] + (1-opt.Alpha)*opt.Temperature*opt.Temperature*kl[r]
	}
	return st
}

// topKRowRef is one position's teacher top k.
type topKRowRef struct {
	ids    []int32
	logits []float32
}

// lossRow computes one position's cross entropy and (when tk is not nil) KL divergence,
// and writes the gradient of the weighted objective, times scale, into drow. p is scratch
// of the vocabulary's size.
func lossRow(drow, row []float32, target int32, tk *topKRowRef, opt LossOptions, scale float64, p []float64) (ce, kl float64) {
	// Hard labels: softmax at temperature 1.
	lse := logSumExp(row, 1, p)
	ce = lse - float64(row[target])
	for i := range drow {
		drow[i] = float32(opt.Alpha * p[i] * scale)
	}
	drow[target] -= float32(opt.Alpha * scale)
	if tk == nil {
		return ce, 0
	}
	// Soft labels: the teacher's top k at temperature T, renormalized.
	temp := opt.Temperature
	q := make([]float64, len(tk.ids))
	tlse := logSumExp(tk.logits, temp, q)
	slse := logSumExp(row, temp, p)
	w := (1 - opt.Alpha) * temp * scale
	for i := range drow {
		drow[i] += float32(w * p[i])
	}
	for j, id := range tk.ids {
		logq := float64(tk.logits[j])/temp - tlse
		logp := float64(row[id])/temp - slse
		kl += q[j] * (logq - logp)
		drow[id] -= float32(w * q[j])
	}
	return ce, kl
}

// logSumExp returns log sum_i exp(x_i / t) and writes the softmax of x/t into p.
func logSumExp(x []float32, t float64, p []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v)/t)
	}
	var s float64
	for i, v := range x {
		p[i] = math.Exp(float64(v)/t - m)
		s += p[i]
	}
	for i := range x {
		p[i] /= s
	}
	return m + math.Log(s)
}
