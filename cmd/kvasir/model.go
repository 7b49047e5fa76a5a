package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/hub"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// resolveModel turns a -m argument into a local path, downloading "hf:ORG/REPO[/FILE]"
// references into the Hugging Face cache first.
func resolveModel(ref string) (string, error) {
	if !hub.IsRef(ref) {
		return ref, nil
	}
	r, err := hub.ParseRef(ref)
	if err != nil {
		return "", err
	}
	opt := hub.OptionsFromEnv()
	opt.Progress = os.Stderr
	return hub.Download(context.Background(), r, opt)
}

// defaultShape and defaultDType give the built-in model served when no -m is given.
const (
	defaultShape = "smollm2-135m"
	defaultDType = quant.Q8_0
)

// defaultChatTemplate is ChatML, the template the built-in model is given.
const defaultChatTemplate = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}`

// openSynthModel synthesizes a model in memory: random weights of a real shape, given as
// "SHAPE[:TYPE]" (such as "smollm2-135m:q8_0"), with the ChatML template.
func openSynthModel(spec string) (*format.Model, error) {
	name, typ, _ := strings.Cut(spec, ":")
	shape, err := synth.Lookup(name)
	if err != nil {
		return nil, err
	}
	dtype := defaultDType
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
	m.ChatTemplate = defaultChatTemplate
	fmt.Fprintf(os.Stderr, "kvasir: model %s-shaped with RANDOM weights (%s, synthesized in memory in %.1fs); its output is gibberish by design.\n",
		shape.Name, dtype, time.Since(start).Seconds())
	return m, nil
}

// openModel opens the model named by a -m argument: a file or folder, an hf: reference, a
// "synth:SHAPE[:TYPE]" model made in memory, or the built-in default model when ref is "";
// tok names a separate tokenizer file (a llama2.c tokenizer for a .bin checkpoint),
// or "".
func openModel(ref, tok string) (*format.Model, error) {
	if ref == "" {
		fmt.Fprintf(os.Stderr, "kvasir: no -m given: using the built-in default model (synth:%s:%s).\n"+
			"kvasir: to run a real model pass -m with a .gguf file, a Hugging Face folder, or hf:ORG/REPO.\n", defaultShape, defaultDType)
		return openSynthModel(defaultShape)
	}
	if spec, ok := strings.CutPrefix(ref, "synth:"); ok {
		return openSynthModel(spec)
	}
	path, err := resolveModel(ref)
	if err != nil {
		return nil, err
	}
	return format.Open(path, format.Options{Tokenizer: tok})
}

// openTokenizer returns the tokenizer of the model or vocabulary file named by a -m
// argument. Unlike openModel it also takes files that hold only a vocabulary (a vocab-only
// GGUF, a tokenizer.json), and needs no weights.
func openTokenizer(ref, tok string) (*tokenizer.Tokenizer, error) {
	path, err := resolveModel(ref)
	if err != nil {
		return nil, err
	}
	var v *tokenizer.Vocab
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, err
	case tok != "":
		v, err = format.LoadVocab(tok, 0)
	case st.IsDir():
		v, err = format.LoadVocab(filepath.Join(path, "tokenizer.json"), 0)
	case strings.HasSuffix(path, ".bin"):
		return nil, fmt.Errorf("%s is a llama2.c checkpoint: name its tokenizer with -z tokenizer.bin", path)
	default:
		v, err = format.LoadVocab(path, 0)
	}
	if err != nil {
		return nil, err
	}
	return tokenizer.New(v)
}
