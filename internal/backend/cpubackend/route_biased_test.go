package cpubackend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// TestRouteExpertsBiased checks DeepSeek-V3's routing against a plain statement of it
// (sigmoid scores; groups ranked by their two best biased scores with a sort; the k best
// of the kept groups' experts), for V3's geometry (256 experts, 8 a token, 4 of 8 groups),
// small groups of 2, and no groups nor bias; and that a shape the groups cannot serve is
// an error.
func TestRouteExpertsBiased(t *testing.T) {
	b := newBackend(t)
	r := rand.New(rand.NewPCG(9, 9))
	for _, c := range []struct {
		experts, k, groups, used int
		bias, normalize          bool
	}{{256, 8, 8, 4, true, true}, {8, 2, 4, 2, true, false}, {16, 3, 0, 0, false, true}} {
		const n = 5
		name := fmt.Sprintf("experts=%d k=%d groups=%d/%d", c.experts, c.k, c.used, c.groups)
		lv := make([]float32, n*c.experts)
		for i := range lv {
			lv[i] = float32(r.NormFloat64() * 2)
		}
		logits := f32Tensor(t, b, n, c.experts, lv...)
		var bias *tensor
		var bv []float64
		if c.bias {
			bias = f32Tensor(t, b, 1, c.experts)
			for i := range bias.f32 {
				bias.f32[i] = float32(r.Float64()*0.2 - 0.1)
				bv = append(bv, float64(bias.f32[i]))
			}
		}
		ids, err := b.NewTensor(quant.I32, n, c.k)
		if err != nil {
			t.Fatal(err)
		}
		gains := f32Tensor(t, b, n, c.k)
		var berr error
		if bias != nil {
			berr = b.RouteExpertsBiased(ids, gains, logits, bias, c.groups, c.used, c.normalize)
		} else {
			berr = b.RouteExpertsBiased(ids, gains, logits, nil, c.groups, c.used, c.normalize)
		}
		if berr != nil {
			t.Fatalf("%s: %v", name, berr)
		}
		for tok := range n {
			s := make([]float64, c.experts)
			sel := make([]float64, c.experts)
			for e := range s {
				s[e] = 1 / (1 + math.Exp(-float64(lv[tok*c.experts+e])))
				sel[e] = s[e]
				if bv != nil {
					sel[e] += bv[e]
				}
			}
			if c.groups > 1 {
				per := c.experts / c.groups
				type group struct {
					g     int
					score float64
				}
				var gs []group
				for g := range c.groups {
					v := append([]float64(nil), sel[g*per:(g+1)*per]...)
					sort.Sort(sort.Reverse(sort.Float64Slice(v)))
					gs = append(gs, group{g, v[0] + v[1]})
				}
				sort.SliceStable(gs, func(i, j int) bool { return gs[i].score > gs[j].score })
				for _, g := range gs[c.used:] {
					for e := g.g * per; e < (g.g+1)*per; e++ {
						sel[e] = math.Inf(-1)
					}
				}
			}
			order := make([]int, c.experts)
			for i := range order {
				order[i] = i
			}
			sort.SliceStable(order, func(i, j int) bool { return sel[order[i]] > sel[order[j]] })
			var sum float64
			for _, e := range order[:c.k] {
				sum += s[e]
			}
			for j, e := range order[:c.k] {
				if got := ids.(*tensor).i32[tok*c.k+j]; int(got) != e {
					t.Fatalf("%s: token %d choice %d: expert %d, want %d", name, tok, j, got, e)
				}
				want := s[e]
				if c.normalize {
					want /= sum
				}
				if got := float64(gains.f32[tok*c.k+j]); math.Abs(got-want) > 1e-6 {
					t.Errorf("%s: token %d gain %d: %v, want %v", name, tok, j, got, want)
				}
			}
		}
	}
	ids, err := b.NewTensor(quant.I32, 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	err = b.RouteExpertsBiased(ids, f32Tensor(t, b, 1, 5), f32Tensor(t, b, 1, 8), nil, 4, 2, true)
	if err == nil || !strings.Contains(err.Error(), "groups") {
		t.Errorf("5 experts from 2 groups of 2: %v", err)
	}
}
