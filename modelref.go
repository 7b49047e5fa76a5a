package kvasir

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/hub"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// SynthDType is the weight type of a synthesized model whose reference names none.
const SynthDType = quant.Q8_0

// RefOptions configures OpenRef.
type RefOptions struct {
	// Tokenizer names a separate tokenizer file (a llama2.c checkpoint's tokenizer.bin).
	Tokenizer string
	// Log receives download progress and notes (a synthesized model's warning); nil
	// discards them.
	Log io.Writer
}

// OpenRef opens the model a reference names: a .gguf file, a llama2.c .bin checkpoint, a
// Hugging Face folder, hf:ORG/REPO[@REV][/FILE] (downloaded into the Hugging Face cache
// first), or synth:SHAPE[:TYPE], a random-weight model of a built-in shape made in memory
// (such as synth:smollm2-135m:q8_0). It is how the commands read -m, and how a draft
// model (SpeculativeConfig.Model) is read.
func OpenRef(ref string, o RefOptions) (*format.Model, error) {
	if shape, ok := strings.CutPrefix(ref, "synth:"); ok {
		return openSynth(shape, o.Log)
	}
	path, err := ResolveRef(ref, o.Log)
	if err != nil {
		return nil, err
	}
	fm, err := format.Open(path, format.Options{Tokenizer: o.Tokenizer})
	if err != nil {
		return nil, encoderHint(path, err)
	}
	return fm, nil
}

// ResolveRef turns a model reference into a local path, downloading an hf: reference into
// the Hugging Face cache (HF_HOME, HF_TOKEN, ...) first, with progress to log (nil: none).
// Other references are returned as they are.
func ResolveRef(ref string, log io.Writer) (string, error) {
	if !hub.IsRef(ref) {
		return ref, nil
	}
	r, err := hub.ParseRef(ref)
	if err != nil {
		return "", err
	}
	opt := hub.OptionsFromEnv()
	opt.Progress = log
	return hub.Download(context.Background(), r, opt)
}

// openSynth synthesizes a random-weight model of "SHAPE[:TYPE]" in memory, noting on log
// that its output is gibberish.
func openSynth(spec string, log io.Writer) (*format.Model, error) {
	name, typ, _ := strings.Cut(spec, ":")
	shape, err := synth.Lookup(name)
	if err != nil {
		return nil, err
	}
	dtype := SynthDType
	if typ != "" {
		if dtype, err = quant.ParseType(typ); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	m, err := synth.Model(shape, dtype, 0)
	if err != nil {
		return nil, err
	}
	if log != nil {
		fmt.Fprintf(log, "kvasir: model %s-shaped with RANDOM weights (%s, synthesized in memory in %.1fs); its output is gibberish by design.\n",
			shape.Name, dtype, time.Since(start).Seconds())
	}
	return m, nil
}
