package format

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// ConvertOptions controls Convert.
type ConvertOptions struct {
	// DType, when Recode is set, re-encodes every weight matrix in this type (norms and
	// biases stay F32; a matrix whose rows are not whole blocks of DType becomes F16).
	DType  quant.Type
	Recode bool
	// FileType, when not F32 (the zero value), is the type general.file_type names (a
	// mixed preset's main type); otherwise it follows the tensors.
	FileType quant.Type
	// Progress, if set, is told the bytes written.
	Progress func(done, total int64)
}

// Convert writes the model m to out: a GGUF file when out ends in ".gguf", else a Hugging
// Face folder. Tensors are rearranged for the target's conventions: q/k rows between the
// NeoX and the interleaved rotary order of llama.cpp's "llama" architecture, and experts
// between one tensor per expert (Hugging Face) and one stacked tensor per layer (GGUF).
func Convert(m *Model, out string, opt ConvertOptions) error {
	toGGUF := strings.HasSuffix(out, ".gguf")
	cfg := m.Config
	if cfg.Arch == "phi3" {
		return fmt.Errorf("convert: phi3 models are not converted (their fused qkv and gate_up projections are split when opened)")
	}
	wantStyle := RopeNeox
	if (toGGUF && (cfg.Arch == "llama" || cfg.Arch == "granite")) || cfg.Arch == "deepseek2" {
		wantStyle = RopeInterleaved // deepseek2's rotary pairs are interleaved in both
	}
	var tensors []OutTensor
	fileType := quant.F32
	for _, t := range m.Tensors {
		if !toGGUF && t.Name == "rope_freqs.weight" {
			continue // config.json's rope_scaling says the same
		}
		ot, err := convertTensor(t, cfg, toGGUF, wantStyle, opt)
		if err != nil {
			return err
		}
		if len(t.Shape) >= 2 && ot[0].Type != quant.F32 {
			fileType = ot[0].Type
		}
		tensors = append(tensors, ot...)
	}
	if toGGUF {
		var err error
		if tensors, err = stackExperts(tensors); err != nil {
			return err
		}
		if cfg.Scaling.Type == "llama3" {
			if _, ok := m.Tensor("rope_freqs.weight"); !ok {
				freqs := Llama3RopeFreqs(cfg)
				data := make([]byte, 4*len(freqs))
				if err := quant.Quantize(quant.F32, freqs, data); err != nil {
					return err
				}
				tensors = append(tensors, OutTensor{Name: "rope_freqs.weight", Type: quant.F32, Shape: []int{len(freqs)}, Data: data})
			}
		}
	}
	cfg.RopeStyle = wantStyle
	c := Contents{Name: m.Name(), Config: cfg, Vocab: m.Vocab, ChatTemplate: m.ChatTemplate}
	if opt.Recode {
		fileType = opt.DType
	}
	if opt.FileType != quant.F32 {
		fileType = opt.FileType
	}
	if toGGUF {
		return WriteGGUF(out, c, fileType, tensors, opt.Progress)
	}
	if err := WriteHF(out, c, fileType, tensors, 0, opt.Progress); err != nil {
		return err
	}
	return writeTokenizerFiles(m, out)
}

// convertTensor returns the tensor as written to the target: renamed experts split out of
// a stacked tensor, rows permuted to the wanted rotary order, elements re-encoded.
func convertTensor(t *Tensor, cfg Config, toGGUF bool, wantStyle RopeStyle, opt ConvertOptions) ([]OutTensor, error) {
	// Split stacked experts (GGUF) into one tensor per expert (Hugging Face).
	if base, ok := strings.CutSuffix(t.Name, "_exps.weight"); ok && !toGGUF {
		return splitExperts(t, base, opt)
	}
	var write func(io.Writer) error
	if heads := qkHeads(t.Name, cfg); heads > 0 && cfg.RopeStyle != wantStyle && len(t.Shape) == 2 {
		w, err := PermuteRows(t, heads, wantStyle == RopeInterleaved)
		if err != nil {
			return nil, err
		}
		write = w
	} else if heads > 0 && cfg.RopeStyle != wantStyle {
		return nil, fmt.Errorf("tensor %q: converting a q/k bias between rotary layouts is not supported", t.Name)
	}
	ot := OutTensor{Name: t.Name, Type: t.Type, Shape: t.Shape, Data: t.Data, Write: write}
	if toGGUF && strings.HasSuffix(t.Name, "ffn_gate_inp_shexp.weight") && len(t.Shape) == 2 && t.Shape[0] == 1 {
		// Qwen2-MoE's shared-expert gate, transformers' Linear(hidden, 1) weight: a vector
		// in GGUF (hf.go writes it back as [1][hidden]).
		ot.Shape = t.Shape[1:]
	}
	if toGGUF && len(ot.Shape) == 1 && (t.Type == quant.F16 || t.Type == quant.BF16) {
		// llama.cpp's CPU backend multiplies by norm weights only in F32 (and its own
		// converter writes every vector in F32).
		return []OutTensor{recode(ot, quant.F32)}, nil
	}
	if opt.Recode && len(t.Shape) >= 2 && t.Type != opt.DType {
		return []OutTensor{recode(ot, opt.DType)}, nil
	}
	return []OutTensor{ot}, nil
}

// qkHeads returns the head count to permute a q or k projection by, or 0 for other tensors.
func qkHeads(name string, cfg Config) int {
	// A factorized projection's rows are its B factor's (lowrank.go).
	switch {
	case strings.HasSuffix(name, ".attn_q.weight"), strings.HasSuffix(name, ".attn_q.bias"), strings.HasSuffix(name, ".attn_q"+LowRankB):
		return cfg.Heads
	case strings.HasSuffix(name, ".attn_k.weight"), strings.HasSuffix(name, ".attn_k.bias"), strings.HasSuffix(name, ".attn_k"+LowRankB):
		return cfg.KVHeads
	}
	return 0
}

// recode re-encodes a tensor row by row in type to (F16 when rows are not whole blocks).
func recode(t OutTensor, to quant.Type) OutTensor {
	cols := t.Shape[len(t.Shape)-1]
	if cols%to.BlockSize() != 0 {
		to = quant.F16
	}
	from := t
	out := OutTensor{Name: t.Name, Type: to, Shape: t.Shape}
	out.Write = func(w io.Writer) error {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(from.writeTo(pw)) }()
		inRow, err := from.Type.RowBytes(cols)
		if err != nil {
			return err
		}
		outRow, err := to.RowBytes(cols)
		if err != nil {
			return err
		}
		in, vals, enc := make([]byte, inRow), make([]float32, cols), make([]byte, outRow)
		rows, _ := (&Tensor{Shape: t.Shape}).Rows()
		for r := 0; r < rows; r++ {
			if _, err := io.ReadFull(pr, in); err != nil {
				pr.CloseWithError(err)
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			if err := quant.Dequantize(from.Type, in, vals); err != nil {
				pr.CloseWithError(err)
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			if err := quant.Quantize(to, vals, enc); err != nil {
				pr.CloseWithError(err)
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			if _, err := w.Write(enc); err != nil {
				pr.CloseWithError(err)
				return err
			}
		}
		return pr.Close()
	}
	return out
}

// splitExperts turns a stacked [E, rows, cols] expert tensor into E tensors named
// "blk.N.ffn_gate.E.weight".
func splitExperts(t *Tensor, base string, opt ConvertOptions) ([]OutTensor, error) {
	if len(t.Shape) != 3 {
		return nil, fmt.Errorf("tensor %q: shape %v, want 3 dimensions", t.Name, t.Shape)
	}
	e := t.Shape[0]
	per := len(t.Data) / e
	var out []OutTensor
	for i := 0; i < e; i++ {
		ot := OutTensor{Name: fmt.Sprintf("%s.%d.weight", base, i), Type: t.Type, Shape: t.Shape[1:], Data: t.Data[i*per : (i+1)*per]}
		if opt.Recode && t.Type != opt.DType {
			ot = recode(ot, opt.DType)
		}
		out = append(out, ot)
	}
	return out, nil
}

var perExpertRE = regexp.MustCompile(`^(blk\.\d+\.ffn_(?:gate|up|down))\.(\d+)\.weight$`)

// perExpertName matches "blk.N.ffn_up.E.weight" and returns the stacked name
// "blk.N.ffn_up_exps.weight" and E.
func perExpertName(name string) (stacked string, expert int, ok bool) {
	m := perExpertRE.FindStringSubmatch(name)
	if m == nil {
		return "", 0, false
	}
	e, _ := strconv.Atoi(m[2])
	return m[1] + "_exps.weight", e, true
}

// stackExperts replaces each layer's per-expert tensors by one stacked tensor written
// expert after expert, as current GGUF files hold them.
func stackExperts(tensors []OutTensor) ([]OutTensor, error) {
	groups := map[string][]OutTensor{}
	var out []OutTensor
	for _, t := range tensors {
		stacked, e, ok := perExpertName(t.Name)
		if !ok {
			out = append(out, t)
			continue
		}
		g := groups[stacked]
		for len(g) <= e {
			g = append(g, OutTensor{})
		}
		g[e] = t
		groups[stacked] = g
	}
	names := make([]string, 0, len(groups))
	for n := range groups {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		g := groups[name]
		first := g[0]
		for i, t := range g {
			if t.Name == "" || t.Type != first.Type || !slices.Equal(t.Shape, first.Shape) {
				return nil, fmt.Errorf("tensor %q: experts are missing or differ in type or shape (expert %d)", name, i)
			}
		}
		parts := g
		out = append(out, OutTensor{
			Name: name, Type: first.Type, Shape: append([]int{len(g)}, first.Shape...),
			Write: func(w io.Writer) error {
				for i := range parts {
					if err := parts[i].writeTo(w); err != nil {
						return err
					}
				}
				return nil
			},
		})
	}
	return out, nil
}

// writeTokenizerFiles puts tokenizer files beside a converted Hugging Face model: copied
// from a Hugging Face source, else derived from a SentencePiece vocabulary.
func writeTokenizerFiles(m *Model, dir string) error {
	if m.Format == "safetensors" {
		for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} {
			b, err := os.ReadFile(filepath.Join(m.Path, name))
			if os.IsNotExist(err) {
				continue
			} else if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	if m.Vocab == nil {
		return nil
	}
	if err := WriteHFTokenizer(dir, m.Vocab, m.ChatTemplate); err != nil {
		return fmt.Errorf("%w; the weights were written without a tokenizer", err)
	}
	return nil
}
