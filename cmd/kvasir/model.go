package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// resolveModel turns a -m argument into a local path, downloading "hf:ORG/REPO[/FILE]"
// references into the Hugging Face cache first.
func resolveModel(ref string) (string, error) { return kvasir.ResolveRef(ref, os.Stderr) }

// defaultShape and defaultDType give the built-in model served when no -m is given.
const (
	defaultShape = "smollm2-135m"
	defaultDType = kvasir.SynthDType
)

// defaultChatTemplate is ChatML, the template the built-in model is given.
const defaultChatTemplate = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}`

// openSynthModel synthesizes a model in memory: random weights of a real shape, given as
// "SHAPE[:TYPE]" (such as "smollm2-135m:q8_0"), with the ChatML template.
func openSynthModel(spec string) (*format.Model, error) {
	m, err := kvasir.OpenRef("synth:"+spec, kvasir.RefOptions{Log: os.Stderr})
	if err != nil {
		return nil, err
	}
	m.ChatTemplate = defaultChatTemplate
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
	return kvasir.OpenRef(ref, kvasir.RefOptions{Tokenizer: tok, Log: os.Stderr})
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
