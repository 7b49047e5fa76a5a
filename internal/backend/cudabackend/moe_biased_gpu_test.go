package cudabackend

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// routeBiasedRef is DeepSeek-V3's routing of one token, written from the contract of
// backend.BiasedRouter with sorts, in float64.
func routeBiasedRef(logits, bias []float32, k, groups, used int, normalize bool) ([]int32, []float64) {
	n := len(logits)
	s, sel := make([]float64, n), make([]float64, n)
	for e, v := range logits {
		s[e] = 1 / (1 + math.Exp(-float64(v)))
		sel[e] = s[e]
		if bias != nil {
			sel[e] += float64(bias[e])
		}
	}
	order := func(v []float64) []int {
		idx := make([]int, len(v))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return v[idx[a]] > v[idx[b]] })
		return idx
	}
	if groups > 1 {
		per := n / groups
		gs := make([]float64, groups)
		for g := range groups {
			o := order(sel[g*per : (g+1)*per])
			gs[g] = sel[g*per+o[0]] + sel[g*per+o[1]]
		}
		keep := map[int]bool{}
		for _, g := range order(gs)[:used] {
			keep[g] = true
		}
		for e := range sel {
			if !keep[e/per] {
				sel[e] = math.Inf(-1)
			}
		}
	}
	ids := make([]int32, k)
	gains := make([]float64, k)
	var sum float64
	for j, e := range order(sel)[:k] {
		ids[j], gains[j] = int32(e), s[e]
		sum += s[e]
	}
	if normalize {
		for j := range gains {
			gains[j] /= sum
		}
	}
	return ids, gains
}

// TestBackendRouteExpertsBiased checks RouteExpertsBiased against routeBiasedRef (ids
// exactly, gains within F32's tolerance): DeepSeek-V3's geometry (256 experts, 8 a token,
// 4 of 8 groups), a small one with 2-expert groups, and no groups nor bias; 1, 5 and 37
// tokens.
func TestBackendRouteExpertsBiased(t *testing.T) {
	b := newTestBackend(t)
	r := rand.New(rand.NewPCG(21, 4))
	for _, c := range []struct {
		experts, k, groups, used int
		bias, normalize          bool
	}{{256, 8, 8, 4, true, true}, {8, 2, 4, 2, true, true}, {16, 3, 1, 1, false, false}} {
		var biasVals []float32
		var bias backend.Tensor
		if c.bias {
			biasVals = randVals(r, c.experts, 0.1)
			data := make([]byte, 4*c.experts)
			for i, v := range biasVals {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
			}
			if err := b.Run(func() error {
				var err error
				bias, err = b.UploadWeight(&format.Tensor{Name: "bias", Type: quant.F32, Shape: []int{c.experts}, Data: data})
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range []int{1, 5, 37} {
			name := fmt.Sprintf("experts=%d k=%d groups=%d/%d bias=%v n=%d", c.experts, c.k, c.used, c.groups, c.bias, n)
			lv := randVals(r, n*c.experts, 3)
			logits, _ := uploadMatrix(t, b, cuda.F32, n, c.experts, lv)
			var ids, gains backend.Tensor
			if err := b.Run(func() error {
				var err error
				if ids, err = b.NewTensor(quant.I32, n, c.k); err != nil {
					return err
				}
				if gains, err = b.NewTensor(quant.F32, n, c.k); err != nil {
					return err
				}
				return b.RouteExpertsBiased(ids, gains, logits, bias, c.groups, c.used, c.normalize)
			}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			gotIDs, gotGains := gpuInts(t, b, ids), tensorValues(t, b, gains)
			var wantGains []float64
			for tok := range n {
				wi, wg := routeBiasedRef(lv[tok*c.experts:(tok+1)*c.experts], biasVals, c.k, c.groups, c.used, c.normalize)
				for j := range c.k {
					if gotIDs[tok*c.k+j] != wi[j] {
						t.Fatalf("%s: token %d: experts %v, want %v", name, tok, gotIDs[tok*c.k:(tok+1)*c.k], wi)
					}
				}
				wantGains = append(wantGains, wg...)
			}
			check(t, name+" gains", cuda.F32, gotGains, wantGains)
		}
	}
}
