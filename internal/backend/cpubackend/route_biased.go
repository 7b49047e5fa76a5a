package cpubackend

import (
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/backend"
)

// RouteExpertsBiased picks each token's experts as DeepSeek-V3 does (see
// backend.BiasedRouter), in float64.
func (b *Backend) RouteExpertsBiased(ids, gains, logits, bias backend.Tensor, groups, groupsUsed int, normalize bool) error {
	const op = "route experts biased"
	id, err := indices(op, "ids", ids)
	if err != nil {
		return err
	}
	g, err := activation(op, "gains", gains)
	if err != nil {
		return err
	}
	lg, err := activation(op, "logits", logits)
	if err != nil {
		return err
	}
	n, k, experts := lg.rows(), id.cols(), lg.cols()
	if id.rows() != n || g.rows() != n || g.cols() != k || k > experts {
		return fmt.Errorf("cpu %s: ids %v and gains %v for logits %v", op, id.shape, g.shape, lg.shape)
	}
	var bs []float32
	if bias != nil {
		bt, err := activation(op, "bias", bias)
		if err != nil {
			return err
		}
		if len(bt.f32) != experts {
			return fmt.Errorf("cpu %s: bias of %d for %d experts", op, len(bt.f32), experts)
		}
		bs = bt.f32
	}
	if groups <= 1 {
		groups, groupsUsed = 1, 1
	}
	if experts%groups != 0 || (groups > 1 && experts/groups < 2) || groupsUsed < 1 || groupsUsed > groups || groupsUsed*(experts/groups) < k {
		return fmt.Errorf("cpu %s: %d experts in %d groups, %d used", op, experts, groups, groupsUsed)
	}
	per := experts / groups
	s, sel := make([]float64, experts), make([]float64, experts)
	allowed := make([]bool, experts)
	groupScore, groupTaken := make([]float64, groups), make([]bool, groups)
	for t := range n {
		for e, v := range lg.f32[t*experts : (t+1)*experts] {
			s[e] = 1 / (1 + math.Exp(-float64(v)))
			sel[e] = s[e]
			if bs != nil {
				sel[e] += float64(bs[e])
			}
			allowed[e] = groups == 1
		}
		if groups > 1 {
			for gr := range groups {
				first, second := math.Inf(-1), math.Inf(-1)
				for _, v := range sel[gr*per : (gr+1)*per] {
					if v > first {
						first, second = v, first
					} else if v > second {
						second = v
					}
				}
				groupScore[gr], groupTaken[gr] = first+second, false
			}
			for range groupsUsed {
				best := -1
				for gr, v := range groupScore {
					if !groupTaken[gr] && (best < 0 || v > groupScore[best]) {
						best = gr
					}
				}
				groupTaken[best] = true
				for e := best * per; e < (best+1)*per; e++ {
					allowed[e] = true
				}
			}
		}
		chosen := id.i32[t*k : (t+1)*k]
		var sum float64
		for j := range chosen {
			best := -1
			for e, v := range sel {
				if allowed[e] && (best < 0 || v > sel[best]) && !picked(chosen[:j], e) {
					best = e
				}
			}
			chosen[j] = int32(best)
			sum += s[best]
		}
		for j, e := range chosen {
			w := s[e]
			if normalize {
				w /= sum
			}
			g.f32[t*k+j] = float32(w)
		}
	}
	return nil
}
