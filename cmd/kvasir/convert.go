package main

import (
	"fmt"
	"os"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

func init() {
	register(command{name: "convert", summary: "convert a model: llama2.c or safetensors to GGUF, GGUF to safetensors", run: runConvert})
}

func runConvert(args []string) error {
	fs := newFlags("convert", "[--dtype T] [-z TOKENIZER] IN OUT(.gguf | folder)")
	dtypeName := fs.String("dtype", "", "re-encode weight matrices in this type (f32, f16, bf16, q8_0, q4_0, q4_k, ...); default keeps them")
	tok := fs.String("z", "", "separate tokenizer file (llama2.c tokenizer.bin for a .bin checkpoint)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return fmt.Errorf("name an input model and an output (a .gguf file or a folder)")
	}
	m, err := openModel(fs.Arg(0), *tok)
	if err != nil {
		return err
	}
	defer m.Close()
	opt := format.ConvertOptions{}
	if *dtypeName != "" {
		if opt.DType, err = quant.ParseType(*dtypeName); err != nil {
			return err
		}
		opt.Recode = true
	}
	bar := newProgress("converting", m.Bytes(), *quiet)
	defer bar.Finish()
	opt.Progress = bar.Update
	if err := format.Convert(m, fs.Arg(1), opt); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "convert: wrote %s\n", fs.Arg(1))
	return nil
}
