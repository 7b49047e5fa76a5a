package format

import "fmt"

// Phi-3 is a Llama block with two fused projections: q, k and v in one matrix
// (attn_qkv, Hugging Face qkv_proj) and the MLP's gate and up in one (ffn_up of twice the
// feed-forward rows, gate first; gate_up_proj). kvasir splits them when it opens the
// model, so that the model binds the Llama family's tensors and a tensor-parallel rank
// takes its heads and MLP columns of each; the parts share the file's bytes (rows are
// contiguous). Its default window is written in config.json (Phi-3-mini: 2047 on every
// layer). LongRoPE (su) scaling, which the 128k models use, is refused.

// phi3HFLayerNames are Phi-3's fused tensors' names.
var phi3HFLayerNames = map[string]string{
	"self_attn.qkv_proj.weight": "attn_qkv.weight",
	"mlp.gate_up_proj.weight":   "ffn_up.weight",
}

// splitPhi3 replaces each layer's fused attn_qkv and ffn_up (gate and up) by their parts,
// views of the same bytes, in the fused tensors' places; a layer whose q (or gate) is
// already a tensor of its own is left as it is. The fused tensors' shapes are checked
// against the config.
func (m *Model) splitPhi3() error {
	c := &m.Config
	if _, ok := m.Tensor("rope_factors_long.weight"); ok {
		return fmt.Errorf("phi3 with LongRoPE scaling (rope_factors_long.weight) is not supported")
	}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	parts := map[*Tensor][]*Tensor{}               // fused tensor -> its parts
	for l := range min(c.Layers, len(m.Tensors)) { // a layer count beyond the tensors is refused later
		p := fmt.Sprintf("blk.%d.", l)
		for _, f := range []struct {
			name  string
			names []string
			rows  []int
		}{
			{p + "attn_qkv.weight", []string{p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, []int{q, kv, kv}},
			{p + "ffn_up.weight", []string{p + "ffn_gate.weight", p + "ffn_up.weight"}, []int{c.FFNDim, c.FFNDim}},
		} {
			if _, split := m.Tensor(f.names[0]); split {
				continue // already apart (llama.cpp reads either form)
			}
			t, ok := m.Tensor(f.name)
			if !ok {
				return fmt.Errorf("tensor %s is missing", f.name)
			}
			total := 0
			for _, r := range f.rows {
				total += r
			}
			if len(t.Shape) != 2 || t.Shape[0] != total {
				return fmt.Errorf("tensor %s: shape %v, want %d rows (its fused parts')", f.name, t.Shape, total)
			}
			if err := t.Check(); err != nil {
				return err
			}
			rb, err := t.Type.RowBytes(t.Shape[1])
			if err != nil {
				return fmt.Errorf("tensor %s: %w", f.name, err)
			}
			row := 0
			for i, name := range f.names {
				part := &Tensor{Name: name, Type: t.Type, Shape: []int{f.rows[i], t.Shape[1]}, Data: t.Data[row*rb : (row+f.rows[i])*rb]}
				parts[t] = append(parts[t], part)
				row += f.rows[i]
			}
		}
	}
	all := m.Tensors
	m.Tensors, m.byName = nil, nil
	for _, t := range all {
		if ps, ok := parts[t]; ok {
			for _, p := range ps {
				m.addTensor(p)
			}
			continue
		}
		m.addTensor(t)
	}
	return nil
}
