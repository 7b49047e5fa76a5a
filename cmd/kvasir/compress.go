package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/promptcompress"
)

func init() {
	register(command{name: "compress", summary: "shorten a prompt by a small model's surprisal (LLMLingua-style prompt compression)", run: runCompress})
}

// compressOutput is what kvasir compress --json prints.
type compressOutput struct {
	Prompt         string  `json:"prompt"`
	Rate           float64 `json:"rate"`
	OriginalTokens int     `json:"original_tokens"`
	KeptTokens     int     `json:"kept_tokens"`
}

func runCompress(args []string) error {
	fs := newFlags("compress", "-m MODEL [-f PROMPT_FILE] [--rate R] [--instruction TEXT] [--question TEXT] [--json] (the prompt: -f, or standard input)")
	file := fs.String("f", "", "file holding the prompt (default or -: standard input)")
	rate := fs.Float64("rate", 0.5, "fraction of the prompt's tokens to keep, in (0, 1]")
	instruction := fs.String("instruction", "", "instructions put before the prompt and kept whole")
	question := fs.String("question", "", "the question, put after the prompt and kept whole (default: the prompt's last sentence is the question)")
	asJSON := fs.Bool("json", false, `print {"prompt", "rate", "original_tokens", "kept_tokens"} (tokens of -m)`)
	ef := addEngineFlags(fs, allEngineFlags)
	if err := ef.parse(fs, args); err != nil {
		return err
	}
	if err := promptcompress.CheckRate(*rate); err != nil {
		return fmt.Errorf("--rate: %w", err)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q (the prompt comes from -f or standard input)", fs.Arg(0))
	}
	in := io.Reader(os.Stdin)
	if p := *file; p != "" && p != "-" {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	text, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("reading the prompt: %w", err)
	}
	eng, err := ef.openEngine(nil)
	if err != nil {
		return err
	}
	defer eng.Close()
	res, err := promptcompress.Compress(context.Background(), promptcompress.EngineScorer{Engine: eng}, compressParts(*instruction, string(text), *question), *rate)
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(compressOutput{Prompt: res.Text(), Rate: *rate, OriginalTokens: res.OriginalTokens, KeptTokens: res.KeptTokens})
	}
	_, err = io.WriteString(os.Stdout, res.Text())
	return err
}

// compressParts lays out the prompt: the instruction and the question kept whole, or, with
// no question, the prompt's last sentence kept as the question.
func compressParts(instruction, prompt, question string) []promptcompress.Part {
	var parts []promptcompress.Part
	if instruction != "" {
		parts = append(parts, promptcompress.Part{Text: instruction, Keep: true})
	}
	if question != "" {
		return append(parts, promptcompress.Part{Text: prompt}, promptcompress.Part{Text: question, Keep: true})
	}
	ss := promptcompress.Sentences(prompt)
	if len(ss) < 2 {
		return append(parts, promptcompress.Part{Text: prompt, Keep: true})
	}
	last := ss[len(ss)-1]
	return append(parts, promptcompress.Part{Text: prompt[:len(prompt)-len(last)]}, promptcompress.Part{Text: last, Keep: true})
}

// openCompressionModels opens the --compression-model of kvasir serve (none: nil), under
// its model name, on the served model's device (with threads CPU threads).
func openCompressionModels(path, device string, threads int) (map[string]*kvasir.Engine, error) {
	if path == "" {
		return nil, nil
	}
	dev, err := kvasir.ParseDevice(device)
	if err != nil {
		return nil, fmt.Errorf("--device: %w", err)
	}
	fm, err := openModel(path, "")
	if err != nil {
		return nil, fmt.Errorf("--compression-model: %w", err)
	}
	eng, err := kvasir.OpenModel(fm, kvasir.Options{Threads: threads, Device: dev})
	if err != nil {
		return nil, fmt.Errorf("--compression-model %s: %w", path, err)
	}
	return map[string]*kvasir.Engine{eng.ModelName(): eng}, nil
}
