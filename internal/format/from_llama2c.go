package format

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/format/llama2c"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// openLlama2c opens a llama2.c checkpoint. Its tokenizer lives in a separate file: the one
// given, else tokenizer.bin beside the checkpoint when present. Its header is held against
// limits l before the checkpoint's tensors are laid out (one entry per layer); a header
// that fails returns a Model of the header alone with the error (see Inspect).
func openLlama2c(path, tokPath string, l Limits) (*Model, error) {
	h, err := llama2c.ReadConfig(path)
	if err != nil {
		return nil, err
	}
	m := &Model{Path: path, Format: "llama2c", Metadata: map[string]any{
		"dim": h.Dim, "hidden_dim": h.HiddenDim, "n_layers": h.Layers, "n_heads": h.Heads,
		"n_kv_heads": h.KVHeads, "vocab_size": h.VocabSize, "seq_len": h.SeqLen,
		"shared_classifier": h.SharedClassifier,
	}, names: llama2cNames}
	m.Config = Config{
		Arch: "llama", VocabSize: h.VocabSize, Dim: h.Dim, Layers: h.Layers, Heads: h.Heads,
		KVHeads: h.KVHeads, HeadDim: h.HeadSize(), RopeDim: h.HeadSize(), FFNDim: h.HiddenDim,
		ContextLen: h.SeqLen, NormEps: 1e-5, RopeTheta: llama2c.RopeTheta, RopeStyle: RopeInterleaved,
	}
	if err := m.Config.check(l, &m.names); err != nil {
		return m, fmt.Errorf("llama2c %s: %w", path, err)
	}
	ck, err := llama2c.Open(path)
	if err != nil {
		return nil, err
	}
	m.closers = append(m.closers, ck)
	for _, t := range ck.Tensors {
		m.addTensor(&Tensor{Name: t.Name, Type: quant.F32, Shape: t.Shape, Data: t.Data})
	}
	if err := m.inferFromTensors(l); err != nil {
		return m, fmt.Errorf("llama2c %s: %w", path, err)
	}
	if tokPath == "" {
		if p := filepath.Join(filepath.Dir(path), "tokenizer.bin"); fileExists(p) {
			tokPath = p
		}
	}
	if tokPath != "" {
		v, err := LoadVocab(tokPath, h.VocabSize)
		if err != nil {
			return m, err
		}
		m.Vocab = v
	}
	return m, nil
}

// LoadVocab reads a tokenizer vocabulary from a file of its own: a llama2.c tokenizer
// (.bin; vocabSize entries, or all the file holds when vocabSize is 0), a Hugging Face tokenizer.json (with tokenizer_config.json
// beside it when present), or a GGUF file's embedded vocabulary.
func LoadVocab(path string, vocabSize int) (*tokenizer.Vocab, error) {
	switch {
	case isGGUF(path):
		f, err := gguf.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return vocabFromGGUF(f)
	case strings.HasSuffix(path, ".json"):
		return vocabFromHFFiles(path, filepath.Join(filepath.Dir(path), "tokenizer_config.json"))
	case strings.HasSuffix(path, ".bin"):
		n := vocabSize
		if n <= 0 {
			n = -1 // read to the end of the file
		}
		lv, err := llama2c.OpenVocab(path, n)
		if err != nil {
			return nil, err
		}
		return tokenizer.VocabFromLlama2c(lv.Pieces, lv.Scores), nil
	}
	return nil, fmt.Errorf("tokenizer %s: want a llama2.c tokenizer (.bin), tokenizer.json or GGUF file", path)
}

// vocabFromHFFiles reads tokenizer.json and, when the file exists, tokenizer_config.json.
func vocabFromHFFiles(tokenizerJSON, tokenizerConfig string) (*tokenizer.Vocab, error) {
	tj, err := os.ReadFile(tokenizerJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	tc, err := os.ReadFile(tokenizerConfig)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	v, err := tokenizer.VocabFromHF(tj, tc)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", tokenizerJSON, err)
	}
	return v, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
