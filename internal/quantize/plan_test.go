package quantize

import (
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

func TestPlanTypes(t *testing.T) {
	q40, err := ParsePlan("Q4_0")
	if err != nil {
		t.Fatal(err)
	}
	km, err := ParsePlan("q4_k_m")
	if err != nil {
		t.Fatal(err)
	}
	q8, _ := ParsePlan("q8_0")
	cases := []struct {
		p     Plan
		name  string
		shape []int
		tied  bool
		want  quant.Type
	}{
		{q40, "blk.0.attn_q.weight", []int{64, 64}, false, quant.Q4_0},
		{q40, "blk.0.attn_norm.weight", []int{64}, false, quant.F32},
		{q40, "blk.0.ffn_down.weight", []int{64, 172}, false, quant.F16}, // stories260K's 172 columns
		{q40, "output.weight", []int{512, 64}, false, quant.Q8_0},        // Q6_K does not fit 64 columns
		{q40, "output.weight", []int{512, 256}, false, quant.Q6_K},
		{q40, "token_embd.weight", []int{512, 256}, true, quant.Q6_K},
		{q40, "token_embd.weight", []int{512, 256}, false, quant.Q4_0},
		{q8, "output.weight", []int{512, 256}, false, quant.Q8_0},
		// Q4_K_M on 8 layers: layers 0 and 7 and (l-1)%3 == 2, i.e. 3 and 6, get Q6_K.
		{km, "blk.0.attn_v.weight", []int{256, 256}, false, quant.Q6_K},
		{km, "blk.1.attn_v.weight", []int{256, 256}, false, quant.Q4_K},
		{km, "blk.3.ffn_down.weight", []int{256, 512}, false, quant.Q6_K},
		{km, "blk.4.ffn_down.weight", []int{256, 512}, false, quant.Q4_K},
		{km, "blk.6.attn_v.weight", []int{256, 256}, false, quant.Q6_K},
		{km, "blk.7.attn_q.weight", []int{256, 256}, false, quant.Q4_K},
		{km, "blk.7.attn_q.weight", []int{256, 96}, false, quant.Q5_0},  // Q4_K's fallback
		{km, "blk.0.ffn_down.weight", []int{64, 172}, false, quant.F16}, // Q6_K -> Q8_0 -> F16
	}
	for _, c := range cases {
		if got := c.p.TypeFor(c.name, c.shape, 8, c.tied); got != c.want {
			t.Errorf("%s: %s %v: %s, want %s", c.p.Name, c.name, c.shape, got, c.want)
		}
	}
	for _, bad := range []string{"q4_2", "q8_k", "q8_1", "", "iq2_xxs"} {
		if _, err := ParsePlan(bad); err == nil {
			t.Errorf("ParsePlan(%q): no error", bad)
		}
	}
}
