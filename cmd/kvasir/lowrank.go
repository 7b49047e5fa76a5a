package main

import (
	"fmt"
	"os"
	"regexp"

	"github.com/kvasir-llm/kvasir/internal/lowrank"
)

func init() {
	register(command{name: "lowrank", summary: "factorize a model's weight matrices by SVD into two thinner ones that run as two matmuls", run: runLowrank})
}

func runLowrank(args []string) error {
	fs := newFlags("lowrank", "-m IN -o OUT.gguf (--rank R | --energy E) [--tensors REGEXP]")
	in := fs.String("m", "", "input model: a .gguf file or a Hugging Face folder")
	tok := fs.String("z", "", "separate tokenizer file (llama2.c tokenizer.bin for a .bin checkpoint)")
	out := fs.String("o", "", "output .gguf file")
	rank := fs.Int("rank", 0, "rank of every factorized matrix (capped by the matrix's smaller side)")
	energy := fs.Float64("energy", 0, "instead of --rank: the share of each matrix's squared singular values to keep, in (0, 1]")
	tensors := fs.String("tensors", lowrank.DefaultTensors, "regular expression over GGUF tensor names choosing the matrices (blocks' attn_q/k/v/output, ffn_gate/up/down)")
	quiet := fs.Bool("quiet", false, "no progress output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *out == "" {
		fs.Usage()
		return fmt.Errorf("-m and -o are required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if (*rank > 0) == (*energy > 0) || *rank < 0 || *energy < 0 {
		return fmt.Errorf("give one of --rank R (>= 1) and --energy E (in (0, 1])")
	}
	if *energy > 1 {
		return fmt.Errorf("--energy %g: want a share in (0, 1]", *energy)
	}
	sel, err := regexp.Compile(*tensors)
	if err != nil {
		return fmt.Errorf("--tensors: %w", err)
	}
	m, err := openModel(*in, *tok)
	if err != nil {
		return err
	}
	defer m.Close()
	bar := newCountBar("matrices", 0, *quiet)
	var bytes *progress
	defer func() {
		if bytes != nil {
			bytes.Finish()
		}
	}()
	opt := lowrank.Options{Rank: *rank, Energy: *energy, Tensors: sel,
		TensorDone: func(done, total int) {
			if bar.bar != nil {
				bar.bar.ChangeMax(total)
			}
			bar.Set(done, total)
		},
		Progress: func(done, total int64) {
			if bytes == nil {
				bar.Finish()
				bytes = newProgress("writing", total, *quiet)
			}
			bytes.Update(done, total)
		}}
	res, err := lowrank.Factorize(m, *out, opt)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "lowrank: wrote %s: %d matrices at ranks %d..%d, %d parameters become %d (%.1f%%)\n", *out, res.Matrices,
		res.MinRank, res.MaxRank, res.ParamsBefore, res.ParamsAfter, 100*float64(res.ParamsAfter)/float64(res.ParamsBefore))
	return nil
}
