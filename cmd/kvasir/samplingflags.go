package main

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/kvasir-llm/kvasir"
)

// samplingFlags are the sampling flags of run, chat and bench offline. Each overrides the
// engine's defaults (Engine.SamplingDefaults: the model's generation_config.json over
// vLLM's neutral defaults, as --generation-config says) only when it is given.
type samplingFlags struct {
	temperature, topP, minP, repetitionPenalty *float32
	topK                                       *int
}

// addSamplingFlags adds --temperature, --top-p, --top-k, --min-p and
// --repetition-penalty to fs.
func addSamplingFlags(fs *flag.FlagSet) *samplingFlags {
	s := &samplingFlags{}
	const from = " (default: the model's generation_config.json, else "
	float := func(dst **float32, name, usage, neutral string) {
		fs.Func(name, usage+from+neutral+")", func(v string) error {
			f, err := strconv.ParseFloat(v, 32)
			if err != nil {
				return fmt.Errorf("%q is not a number", v)
			}
			x := float32(f)
			*dst = &x
			return nil
		})
	}
	float(&s.temperature, "temperature", "sampling temperature; 0 is greedy", "1")
	float(&s.topP, "top-p", "nucleus sampling: keep the most likely tokens up to this probability (1: off)", "1")
	float(&s.minP, "min-p", "drop tokens less likely than this fraction of the most likely (0: off)", "0")
	float(&s.repetitionPenalty, "repetition-penalty", "penalize tokens already in the prompt or the output, as vLLM does (> 1 discourages repeats; 1: off)", "1")
	fs.Func("top-k", "keep the K most likely tokens (0: off)"+from+"off)", func(v string) error {
		k, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		s.topK = &k
		return nil
	})
	return s
}

// params returns the engine's defaults d with the flags given laid over them.
func (s *samplingFlags) params(d kvasir.SamplingDefaults) kvasir.SamplingParams {
	p := d.Params()
	set := func(dst *float32, v *float32) {
		if v != nil {
			*dst = *v
		}
	}
	set(&p.Temperature, s.temperature)
	set(&p.TopP, s.topP)
	set(&p.MinP, s.minP)
	set(&p.RepetitionPenalty, s.repetitionPenalty)
	if s.topK != nil {
		p.TopK = *s.topK
	}
	return p
}
