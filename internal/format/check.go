package format

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// inferFromTensors completes and checks the Config against the tensors present: tied
// embeddings, q/k/v biases, vocabulary size, and every layer's weight shapes. The header's
// counts are held against limits l and against the tensors that exist before anything is
// done per declared layer or expert, so a false count is refused at once. Errors name the
// fields as the model's files do.
func (m *Model) inferFromTensors(l Limits) error {
	c, n := &m.Config, &m.names
	emb, ok := m.Tensor("token_embd.weight")
	if !ok {
		return fmt.Errorf("tensor token_embd.weight is missing")
	}
	if len(emb.Shape) != 2 {
		return fmt.Errorf("tensor token_embd.weight: shape %v, want 2 dimensions", emb.Shape)
	}
	if c.VocabSize == 0 {
		c.VocabSize = emb.Shape[0]
	}
	_, hasOutput := m.Tensor("output.weight")
	c.TiedEmbeddings = !hasOutput
	_, c.QKVBias = m.Tensor("blk.0.attn_q.bias")
	if _, ok := m.Tensor("blk.0.attn_q_norm.weight"); ok {
		c.QKNorm = true
	}
	if c.FFNDim == 0 {
		t, ok := m.Tensor("blk.0.ffn_up.weight")
		if !ok {
			t, ok = m.Tensor("blk.0.ffn_up" + LowRankB)
		}
		if ok && len(t.Shape) == 2 {
			c.FFNDim = t.Shape[0]
		}
	}
	if err := m.checkLayerCount(n); err != nil {
		return err
	}
	if err := c.check(l, n); err != nil {
		return err
	}
	if err := m.checkVocab(); err != nil {
		return err
	}
	if err := m.checkShapes(n); err != nil {
		return err
	}
	for _, t := range m.Tensors {
		if !t.Type.Known() {
			return fmt.Errorf("tensor %s: unsupported type %s", t.Name, t.Type)
		}
		if err := t.Check(); err != nil {
			return err
		}
	}
	return nil
}

// layerOf returns N of a tensor named "blk.N.*", or false for other names.
func layerOf(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return 0, false
	}
	idx, _, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 {
		return 0, false
	}
	return i, true
}

// checkLayerCount holds the header's layer count against the layers the tensors belong
// to: a count beyond the last blk.N present, or a blk.N beyond the count, is refused
// before anything is looked up per layer.
func (m *Model) checkLayerCount(n *fieldNames) error {
	present, last := 0, ""
	for _, t := range m.Tensors {
		if i, ok := layerOf(t.Name); ok && i+1 > present {
			present, last = i+1, t.Name
		}
	}
	layers := m.Config.Layers
	switch {
	case present == 0:
		return fmt.Errorf("config: %s is %d, but no tensor belongs to a layer (blk.N.*)", n.layers, layers)
	case present < layers:
		return fmt.Errorf("config: %s is %d, but the tensors hold only %d layers (blk.0 to blk.%d)", n.layers, layers, present, present-1)
	case present > layers:
		return fmt.Errorf("config: %s is %d, but tensor %s belongs to layer %d", n.layers, layers, last, present-1)
	}
	return nil
}

// checkVocab refuses a tokenizer with more tokens than the model has embedding rows: its
// ids past the last row could not be embedded.
func (m *Model) checkVocab() error {
	if m.Vocab == nil || len(m.Vocab.Tokens) <= m.Config.VocabSize {
		return nil
	}
	return fmt.Errorf("tokenizer: %d tokens, more than the %d of %s (the rows of token_embd.weight)", len(m.Vocab.Tokens), m.Config.VocabSize, m.names.vocab)
}

// expectation is a tensor a Config calls for: its name (after a layer's "blk.N." prefix
// for a layer's tensors), its shape, and the fields the shape comes from (for errors).
type expectation struct {
	name  string
	shape []int
	from  string
	// loose accepts any shape of the same elements and innermost dimension (as the model
	// binds it): for tensors that files store with leading dimensions of 1.
	loose bool
}

// check looks the tensor up and compares its shape; prefix is "" or a layer's "blk.N.".
func (e expectation) check(m *Model, prefix string) error {
	name := prefix + e.name
	t, ok := m.Tensor(name)
	if !ok && len(e.shape) == 2 {
		if base, isWeight := strings.CutSuffix(name, ".weight"); isWeight {
			if _, factored := m.Tensor(base + LowRankA); factored {
				return checkLowRank(m, base, e)
			}
		}
	}
	if !ok {
		return fmt.Errorf("tensor %s is missing", name)
	}
	same := slices.Equal(t.Shape, e.shape)
	if e.loose && !same && len(t.Shape) > 0 {
		same = t.Elements() == product(e.shape) && t.Shape[len(t.Shape)-1] == e.shape[len(e.shape)-1]
	}
	if !same {
		return fmt.Errorf("tensor %s: shape %v, want %v (from %s)", name, t.Shape, e.shape, e.from)
	}
	return nil
}

// product multiplies the dimensions of a shape whose counts check has bounded.
func product(shape []int) int {
	p := 1
	for _, d := range shape {
		p *= d
	}
	return p
}

// checkShapes checks every tensor the Config calls for, model-wide and per layer. The
// layer and expert counts have been held against the tensors present, so the loops are
// bounded by the file.
func (m *Model) checkShapes(n *fieldNames) error {
	c := &m.Config
	global := []expectation{
		{name: "token_embd.weight", shape: []int{c.VocabSize, c.Dim}, from: n.vocab + ", " + n.dim},
		{name: "output_norm.weight", shape: []int{c.Dim}, from: n.dim},
	}
	if !c.TiedEmbeddings {
		global = append(global, expectation{name: "output.weight", shape: []int{c.VocabSize, c.Dim}, from: n.vocab + ", " + n.dim})
	}
	for _, e := range global {
		if err := e.check(m, ""); err != nil {
			return err
		}
	}
	dense := layerExpectations(c, n, true)
	perLayer := layerExpectations(c, n, false)
	stacked := false
	if c.Experts > 0 {
		first := "blk." + strconv.Itoa(c.LeadingDenseLayers) + "."
		_, stacked = m.Tensor(first + "ffn_gate_exps.weight")
		perLayer = append(perLayer, expertExpectations(c, n, stacked)...)
		if c.ExpertSigmoid {
			perLayer = append(perLayer, expectation{name: "exp_probs_b.bias", shape: []int{c.Experts}, from: n.experts, loose: true})
		}
		if _, ok := m.Tensor(first + "ffn_up_shexp.weight"); ok && c.SharedExpertFFN == 0 {
			return fmt.Errorf("tensor %sffn_up_shexp.weight is a shared expert, but %s is 0", first, n.sharedFFN)
		}
	}
	for l := range c.Layers {
		prefix := "blk." + strconv.Itoa(l) + "."
		es := perLayer
		if !c.MoELayer(l) {
			es = dense
		}
		for _, e := range es {
			if err := e.check(m, prefix); err != nil {
				return err
			}
		}
		if c.MoELayer(l) && !stacked {
			if err := checkExperts(m, c, n, prefix); err != nil {
				return err
			}
		}
	}
	return nil
}

// layerExpectations lists the attention tensors of one layer and, when dense is set,
// its dense MLP's.
func layerExpectations(c *Config, n *fieldNames, dense bool) []expectation {
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	qFrom := n.heads + " x " + n.headDim
	kvFrom := n.kvHeads + " x " + n.headDim
	es := []expectation{
		{name: "attn_q.weight", shape: []int{q, c.Dim}, from: qFrom + ", " + n.dim},
		{name: "attn_k.weight", shape: []int{kv, c.Dim}, from: kvFrom + ", " + n.dim},
		{name: "attn_v.weight", shape: []int{kv, c.Dim}, from: kvFrom + ", " + n.dim},
		{name: "attn_output.weight", shape: []int{c.Dim, q}, from: n.dim + ", " + qFrom},
	}
	if c.MLA() {
		es = mlaExpectations(c, n)
	}
	if !c.NoPreNorms {
		es = append(es,
			expectation{name: "attn_norm.weight", shape: []int{c.Dim}, from: n.dim},
			expectation{name: "ffn_norm.weight", shape: []int{c.Dim}, from: n.dim})
	}
	if c.PostNorms {
		es = append(es,
			expectation{name: "post_attention_norm.weight", shape: []int{c.Dim}, from: n.dim},
			expectation{name: "post_ffw_norm.weight", shape: []int{c.Dim}, from: n.dim})
	}
	if c.QKVBias {
		es = append(es,
			expectation{name: "attn_q.bias", shape: []int{q}, from: qFrom},
			expectation{name: "attn_k.bias", shape: []int{kv}, from: kvFrom},
			expectation{name: "attn_v.bias", shape: []int{kv}, from: kvFrom})
	}
	switch {
	case c.QKNormFull:
		es = append(es,
			expectation{name: "attn_q_norm.weight", shape: []int{q}, from: qFrom},
			expectation{name: "attn_k_norm.weight", shape: []int{kv}, from: kvFrom})
	case c.QKNorm:
		es = append(es,
			expectation{name: "attn_q_norm.weight", shape: []int{c.HeadDim}, from: n.headDim},
			expectation{name: "attn_k_norm.weight", shape: []int{c.HeadDim}, from: n.headDim})
	}
	if dense {
		ffn := n.ffn + ", " + n.dim
		es = append(es,
			expectation{name: "ffn_gate.weight", shape: []int{c.FFNDim, c.Dim}, from: ffn},
			expectation{name: "ffn_up.weight", shape: []int{c.FFNDim, c.Dim}, from: ffn},
			expectation{name: "ffn_down.weight", shape: []int{c.Dim, c.FFNDim}, from: n.dim + ", " + n.ffn})
	}
	return es
}

// expertExpectations lists the router, the shared expert and, when stacked, the routed
// experts' [experts][rows][cols] tensors of one layer.
func expertExpectations(c *Config, n *fieldNames, stacked bool) []expectation {
	f, e := c.ExpertFFNDim, c.Experts
	es := []expectation{{name: "ffn_gate_inp.weight", shape: []int{e, c.Dim}, from: n.experts + ", " + n.dim}}
	if stacked {
		from := n.experts + ", " + n.expertFFN + ", " + n.dim
		es = append(es,
			expectation{name: "ffn_gate_exps.weight", shape: []int{e, f, c.Dim}, from: from, loose: true},
			expectation{name: "ffn_up_exps.weight", shape: []int{e, f, c.Dim}, from: from, loose: true},
			expectation{name: "ffn_down_exps.weight", shape: []int{e, c.Dim, f}, from: from, loose: true})
	}
	if s := c.SharedExpertFFN; s > 0 {
		from := n.sharedFFN + ", " + n.dim
		es = append(es,
			expectation{name: "ffn_gate_shexp.weight", shape: []int{s, c.Dim}, from: from, loose: true},
			expectation{name: "ffn_up_shexp.weight", shape: []int{s, c.Dim}, from: from, loose: true},
			expectation{name: "ffn_down_shexp.weight", shape: []int{c.Dim, s}, from: from, loose: true})
		if c.SharedExpertGated() {
			es = append(es, expectation{name: "ffn_gate_inp_shexp.weight", shape: []int{c.Dim}, from: n.dim, loose: true})
		}
	}
	return es
}

// checkExperts checks a layer's routed experts stored one tensor per matrix
// ("ffn_gate.E.weight"), stopping at the first that is missing or misshapen.
func checkExperts(m *Model, c *Config, n *fieldNames, prefix string) error {
	from := n.expertFFN + ", " + n.dim
	for e := range c.Experts {
		x := strconv.Itoa(e)
		for _, w := range []expectation{
			{name: "ffn_gate." + x + ".weight", shape: []int{c.ExpertFFNDim, c.Dim}, from: from, loose: true},
			{name: "ffn_up." + x + ".weight", shape: []int{c.ExpertFFNDim, c.Dim}, from: from, loose: true},
			{name: "ffn_down." + x + ".weight", shape: []int{c.Dim, c.ExpertFFNDim}, from: from, loose: true},
		} {
			if err := w.check(m, prefix); err != nil {
				return fmt.Errorf("%w (%s %d)", err, n.experts, c.Experts)
			}
		}
	}
	return nil
}
