package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/encoder"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

func init() {
	register(command{name: "inspect", summary: "describe a model: architecture, size, dtypes, tokenizer, template", run: runInspect})
}

// inspection is what "kvasir inspect" reports, also as JSON with --json.
type inspection struct {
	Path          string         `json:"path"`
	Format        string         `json:"format"`
	Architecture  string         `json:"architecture"`
	Parameters    int64          `json:"parameters"`
	Bytes         int64          `json:"bytes"`
	DTypes        map[string]int `json:"dtypes"` // tensor count per type
	ContextLength int            `json:"context_length"`
	Config        format.Config  `json:"config"`
	Tokenizer     string         `json:"tokenizer"`
	VocabSize     int            `json:"vocab_size"`
	Special       map[string]any `json:"special_tokens"`
	ChatTemplate  bool           `json:"chat_template"`
	Tensors       []tensorLine   `json:"tensors,omitempty"`
	// Problem is why kvasir refuses the model (its header disagrees with its tensors or
	// exceeds a limit); "" for a model it runs.
	Problem string `json:"problem,omitempty"`
}

type tensorLine struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Shape []int  `json:"shape"`
}

func runInspect(args []string) error {
	fs := newFlags("inspect", "[--json] [--tensors] [-z TOKENIZER] MODEL")
	asJSON := fs.Bool("json", false, "print one JSON object")
	tensors := fs.Bool("tensors", false, "list every tensor")
	tok := fs.String("z", "", "separate tokenizer file (llama2.c tokenizer.bin for a .bin checkpoint)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("name one model")
	}
	if encoder.IsEncoder(fs.Arg(0)) {
		return inspectEncoder(fs.Arg(0), *asJSON, *tensors)
	}
	m, problem := inspectModel(fs.Arg(0), *tok)
	if m == nil {
		return problem
	}
	defer m.Close()
	in := inspection{
		Path: m.Path, Format: m.Format, Architecture: describeArch(m.Config), Parameters: m.ParamCount(),
		Bytes: m.Bytes(), DTypes: map[string]int{}, ContextLength: m.Config.ContextLen, Config: m.Config,
		Tokenizer: "none", ChatTemplate: m.ChatTemplate != "", Special: map[string]any{},
	}
	if problem != nil {
		in.Problem = problem.Error()
	}
	for _, t := range m.Tensors {
		in.DTypes[t.Type.String()]++
		if *tensors {
			in.Tensors = append(in.Tensors, tensorLine{t.Name, t.Type.String(), t.Shape})
		}
	}
	if m.Vocab != nil {
		if t, err := tokenizer.New(m.Vocab); err == nil {
			in.Tokenizer = t.Kind()
		} else {
			in.Tokenizer = "unusable: " + err.Error()
		}
		if m.Vocab.Model == "gpt2" {
			in.Tokenizer += " (pre-tokenizer " + m.Vocab.Pre + ")"
		}
		in.VocabSize = len(m.Vocab.Tokens)
		for name, id := range map[string]int{"bos": m.Vocab.BOS, "eos": m.Vocab.EOS, "unk": m.Vocab.UNK, "pad": m.Vocab.PAD, "eot": m.Vocab.EOT} {
			if id >= 0 && id < len(m.Vocab.Tokens) {
				in.Special[name] = map[string]any{"id": id, "text": m.Vocab.Tokens[id]}
			}
		}
		in.Special["add_bos"] = m.Vocab.AddBOS
		in.Special["add_eos"] = m.Vocab.AddEOS
	}
	if *asJSON {
		if err := printJSON(in); err != nil {
			return err
		}
		return problem
	}
	c := m.Config
	fmt.Printf("model:          %s (%s)\n", in.Path, in.Format)
	fmt.Printf("architecture:   %s\n", in.Architecture)
	fmt.Printf("parameters:     %s (%s of weights)\n", humanCount(in.Parameters), humanBytes(in.Bytes))
	fmt.Printf("dtypes:         %s\n", describeDTypes(in.DTypes))
	fmt.Printf("context length: %d\n", in.ContextLength)
	fmt.Printf("shape:          %d layers, dim %d, %d heads (%d kv, head dim %d), ffn %d, vocab %d\n",
		c.Layers, c.Dim, c.Heads, c.KVHeads, c.HeadDim, c.FFNDim, c.VocabSize)
	fmt.Printf("rope:           theta %g, %s, dim %d%s\n", c.RopeTheta, c.RopeStyle, c.RopeDim, describeScaling(c.Scaling))
	if c.MLA() {
		fmt.Printf("latent attn:    q rank %d, kv rank %d, head dims nope %d + rope %d, value %d (cached: %d a token)\n",
			c.QLoRARank, c.KVLoRARank, c.QKNopeDim, c.RopeDim, c.VHeadDim, c.HeadDim)
	}
	if c.Experts > 0 {
		fmt.Printf("experts:        %d, %d per token, ffn %d\n", c.Experts, c.ExpertsUsed, c.ExpertFFNDim)
		if c.LeadingDenseLayers > 0 || c.ExpertScale > 0 {
			fmt.Printf("                %d leading dense layers, shared ffn %d, routed scale %g\n", c.LeadingDenseLayers, c.SharedExpertFFN, c.ExpertScale)
		}
		if c.ExpertSigmoid {
			fmt.Printf("                sigmoid scores with a selection bias, %d of %d groups\n", max(c.ExpertGroupsUsed, 1), max(c.ExpertGroups, 1))
		}
	}
	fmt.Printf("tokenizer:      %s, %d tokens\n", in.Tokenizer, in.VocabSize)
	keys := make([]string, 0, len(in.Special))
	for k := range in.Special {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		if v, ok := in.Special[k].(map[string]any); ok {
			parts = append(parts, fmt.Sprintf("%s=%d %q", k, v["id"], v["text"]))
		} else {
			parts = append(parts, fmt.Sprintf("%s=%v", k, in.Special[k]))
		}
	}
	fmt.Printf("special tokens: %s\n", strings.Join(parts, ", "))
	fmt.Printf("chat template:  %v\n", yesNo(in.ChatTemplate))
	for _, t := range in.Tensors {
		fmt.Printf("  %-40s %-6s %v\n", t.Name, t.Type, t.Shape)
	}
	if problem != nil {
		fmt.Printf("refused:        %v\n", problem)
	}
	return problem
}

// inspectModel opens a model for inspection: like openModel, but a file whose header
// kvasir refuses comes back with the reason (see format.Inspect), so that inspect shows
// what the header declares. The model is nil when nothing could be read.
func inspectModel(ref, tok string) (*format.Model, error) {
	if ref == "" || strings.HasPrefix(ref, "synth:") {
		return openModel(ref, tok)
	}
	path, err := resolveModel(ref)
	if err != nil {
		return nil, err
	}
	return format.Inspect(path, format.Options{Tokenizer: tok})
}

func describeArch(c format.Config) string {
	s := c.Arch
	var extras []string
	if c.Experts > 0 {
		extras = append(extras, fmt.Sprintf("%dx MoE", c.Experts))
	}
	if c.MLA() {
		extras = append(extras, "latent attention")
	}
	if c.QKVBias {
		extras = append(extras, "qkv bias")
	}
	if c.QKNorm {
		extras = append(extras, "qk norm")
	}
	if c.TiedEmbeddings {
		extras = append(extras, "tied embeddings")
	}
	if len(extras) > 0 {
		s += " (" + strings.Join(extras, ", ") + ")"
	}
	return s
}

func describeScaling(s format.RopeScaling) string {
	if s.Type == "" {
		return ""
	}
	return fmt.Sprintf(", %s scaling x%g (from %d)", s.Type, s.Factor, s.OriginalContextLen)
}

func describeDTypes(m map[string]int) string {
	var parts []string
	for t, n := range m {
		parts = append(parts, fmt.Sprintf("%s x%d", t, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
