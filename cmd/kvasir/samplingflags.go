package main

import (
	"flag"
	"fmt"
	"math"
	"strconv"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
)

// samplingFlags are the sampling flags of run, chat and bench offline, kept as the fields
// of a generation_config.json: each overrides the engine's defaults
// (Engine.SamplingDefaults: the model's generation_config.json over vLLM's neutral
// defaults, as --generation-config says) only when it is given.
type samplingFlags struct {
	given hfconfig.GenerationConfig
}

// addSamplingFlags adds --temperature, --top-p, --top-k, --min-p and
// --repetition-penalty to fs.
func addSamplingFlags(fs *flag.FlagSet) *samplingFlags {
	s := &samplingFlags{}
	const from = " (default: the model's generation_config.json, else "
	// float adds a float flag whose value ok accepts (want says which).
	float := func(dst **float64, name, usage, neutral, want string, ok func(float64) bool) {
		fs.Func(name, usage+from+neutral+")", func(v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("%q is not a number", v)
			}
			if !ok(f) {
				return fmt.Errorf("%s: want %s", v, want)
			}
			*dst = &f
			return nil
		})
	}
	float(&s.given.Temperature, "temperature", "sampling temperature; 0 is greedy", "1", "at least 0", func(f float64) bool { return f >= 0 && !math.IsInf(f, 0) })
	float(&s.given.TopP, "top-p", "nucleus sampling: keep the most likely tokens up to this probability (1: off)", "1", "a probability in (0, 1]", func(f float64) bool { return f > 0 && f <= 1 })
	float(&s.given.MinP, "min-p", "drop tokens less likely than this fraction of the most likely (0: off)", "0", "a fraction in [0, 1]", func(f float64) bool { return f >= 0 && f <= 1 })
	float(&s.given.RepetitionPenalty, "repetition-penalty", "penalize tokens already in the prompt or the output, as vLLM does (> 1 discourages repeats; 1: off)", "1", "more than 0", func(f float64) bool { return f > 0 && !math.IsInf(f, 0) })
	fs.Func("top-k", "keep the K most likely tokens (0 or -1: off)"+from+"off)", func(v string) error {
		k, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		if k < -1 {
			return fmt.Errorf("%d: want -1 or more (-1 and 0: off)", k)
		}
		s.given.TopK = &k
		return nil
	})
	return s
}

// params returns sampling parameters of the engine's defaults d with the flags given laid
// over them.
func (s *samplingFlags) params(d kvasir.SamplingDefaults) kvasir.SamplingParams {
	return d.With(&s.given).Params()
}
