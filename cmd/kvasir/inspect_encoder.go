package main

import (
	"fmt"
	"sort"

	"github.com/kvasir-llm/kvasir/internal/encoder"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// encoderInspection is what "kvasir inspect" reports of an encoder (embedding) model.
type encoderInspection struct {
	Path         string         `json:"path"`
	Architecture string         `json:"architecture"`
	Kind         string         `json:"kind"` // "embedding" or "cross-encoder"
	Parameters   int64          `json:"parameters"`
	DTypes       map[string]int `json:"dtypes"`
	Config       encoder.Config `json:"config"`
	Pooling      string         `json:"pooling"`
	Tokenizer    string         `json:"tokenizer"`
	VocabSize    int            `json:"vocab_size"`
	Tensors      []tensorLine   `json:"tensors,omitempty"`
}

// inspectEncoder describes the encoder model at path.
func inspectEncoder(path string, asJSON, tensors bool) error {
	f, err := encoder.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	c := f.Config
	in := encoderInspection{Path: path, Architecture: c.Arch, Kind: "embedding", DTypes: map[string]int{},
		Config: c, Pooling: c.Pooling.String(), Tokenizer: "none", VocabSize: c.VocabSize}
	if c.Labels > 0 {
		in.Kind = fmt.Sprintf("cross-encoder (%d labels)", c.Labels)
	}
	var names []string
	for name, t := range f.Tensors {
		in.Parameters += int64(t.Elements())
		in.DTypes[t.Type.String()]++
		names = append(names, name)
	}
	sort.Strings(names)
	if tensors {
		for _, n := range names {
			t := f.Tensors[n]
			in.Tensors = append(in.Tensors, tensorLine{n, t.Type.String(), t.Shape})
		}
	}
	if f.Vocab != nil {
		if t, err := tokenizer.New(f.Vocab); err == nil {
			in.Tokenizer = t.Kind()
		} else {
			in.Tokenizer = "unusable: " + err.Error()
		}
	}
	if asJSON {
		return printJSON(in)
	}
	fmt.Printf("path:          %s\narchitecture:  %s, %s\nparameters:    %d\n", in.Path, in.Architecture, in.Kind, in.Parameters)
	fmt.Printf("shape:         %d layers, hidden %d, %d heads, intermediate %d, %d positions, %d token types\n",
		c.Layers, c.Dim, c.Heads, c.FFNDim, c.MaxPositions, c.TypeVocab)
	fmt.Printf("pooling:       %s\ntokenizer:     %s, %d tokens\ndtypes:        %v\n", in.Pooling, in.Tokenizer, in.VocabSize, in.DTypes)
	for _, t := range in.Tensors {
		fmt.Printf("  %-40s %-5s %v\n", t.Name, t.Type, t.Shape)
	}
	return nil
}
