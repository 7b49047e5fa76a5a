package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/encoder"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/quantize"
	"github.com/kvasir-llm/kvasir/internal/synth"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

func init() {
	register(command{name: "synth", summary: "write a random-weight model of a real shape (GGUF or HF folder)", run: runSynth})
}

func runSynth(args []string) error {
	fs := newFlags("synth", "--shape NAME | --config config.json  -o OUT(.gguf | folder)")
	shape := fs.String("shape", "", "model shape: "+strings.Join(synth.Names(), ", ")+"; encoders (f32 weights, a small WordPiece vocabulary): "+strings.Join(encoder.SynthShapes(), ", "))
	configPath := fs.String("config", "", "a Hugging Face config.json giving the shape instead of --shape")
	dtypeName := fs.String("dtype", "f16", "weight type: f32, f16, bf16, q8_0, q4_0, q4_k (and the other GGUF types), a mixed preset (q4_k_m, q5_k_m: as kvasir quantize writes them), or fp8 for a Hugging Face folder (an FP8 checkpoint: the linear layers as F8_E4M3 with per-channel weight_scale, the rest BF16)")
	seed := fs.Uint64("seed", 0, "random seed; the same seed gives the same weights")
	out := fs.String("o", "", "output: a .gguf file, or a folder for a Hugging Face model")
	tokPath := fs.String("tokenizer", "", "attach a real tokenizer: a tokenizer.json, or a GGUF whose vocabulary is used")
	quiet := fs.Bool("quiet", false, "no progress bar")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || (*shape == "") == (*configPath == "") || fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("need -o and exactly one of --shape or --config")
	}
	if c, ok := encoder.SynthConfig(*shape); ok {
		fmt.Fprintf(os.Stderr, "synth: encoder %s (f32, random weights, seed %d) -> %s\n", *shape, *seed, *out)
		return encoder.WriteSynth(*out, "synthetic "+*shape, c, *seed)
	}
	// fp8: BF16 weights whose linear layers are then quantized as --quantization fp8 does,
	// written as an FP8 checkpoint (F8_E4M3 weights with per-channel weight_scale).
	fp8 := strings.EqualFold(*dtypeName, "fp8")
	dtype := quant.BF16
	var err error
	// preset is a mixed preset's plan (q4_k_m, q5_k_m: llama.cpp's choice of more bits for
	// some matrices, as kvasir quantize writes them); nil for one type throughout.
	var preset *quantize.Plan
	if !fp8 {
		if dtype, err = quant.ParseType(*dtypeName); err != nil {
			p, perr := quantize.ParsePlan(*dtypeName)
			if perr != nil || p.More == quant.F32 {
				return err
			}
			preset, dtype = &p, p.FileType()
		}
	}
	var cfg format.Config
	name := *shape
	if *shape != "" {
		s, err := synth.Lookup(*shape)
		if err != nil {
			return err
		}
		cfg = s.Config
	} else {
		h, err := hfconfig.ReadConfig(*configPath)
		if err != nil {
			return err
		}
		if cfg, err = format.ConfigFromHF(h); err != nil {
			return fmt.Errorf("%s: %w", *configPath, err)
		}
		if h.Architecture == hfconfig.Llama || h.Architecture == hfconfig.Mistral || h.Architecture == hfconfig.Mixtral || h.Architecture == hfconfig.Granite {
			cfg.RopeStyle = format.RopeInterleaved // as llama.cpp's converter lays out "llama"
		}
		name = strings.TrimSuffix(filepath.Base(*configPath), ".json")
	}

	// The vocabulary: a real one when asked, else a made-up byte-fallback one so that the
	// model can read and write any text.
	var vocab *tokenizer.Vocab
	if *tokPath != "" {
		if vocab, err = format.LoadVocab(*tokPath, cfg.VocabSize); err != nil {
			return err
		}
		if len(vocab.Tokens) != cfg.VocabSize {
			fmt.Fprintf(os.Stderr, "synth: the tokenizer has %d tokens; the model's vocabulary is resized from %d to match\n", len(vocab.Tokens), cfg.VocabSize)
			cfg.VocabSize = len(vocab.Tokens)
		}
	} else if vocab, err = synth.ByteVocab(cfg.VocabSize); err != nil {
		return err
	}

	toHF := !strings.HasSuffix(*out, ".gguf")
	target := synth.GGUF
	if toHF {
		target = synth.HF
		if dtype != quant.F32 && dtype != quant.F16 && dtype != quant.BF16 {
			return fmt.Errorf("a Hugging Face folder holds f32, f16 or bf16 weights, not %s; write a .gguf for quantized weights", dtype)
		}
	}
	if fp8 && !toHF {
		return fmt.Errorf("fp8 weights are written to a Hugging Face folder (F8_E4M3 weights with a weight_scale); GGUF has no FP8 type")
	}
	typeOf := func(string, []int) quant.Type { return dtype }
	if preset != nil { // a GGUF: the check above refused a folder of its base type
		typeOf = func(name string, shape []int) quant.Type {
			return preset.TypeFor(name, shape, cfg.Layers, cfg.TiedEmbeddings)
		}
	}
	tensors, err := synth.TensorsTyped(cfg, typeOf, *seed, target)
	if err != nil {
		return err
	}
	if fp8 {
		if err := quantizeFP8(tensors); err != nil {
			return err
		}
	}
	contents := format.Contents{Name: "synthetic " + name, Config: cfg, Vocab: vocab}
	var total int64
	for i := range tensors {
		n, err := tensors[i].Size()
		if err != nil {
			return err
		}
		total += n
	}
	if fp8 {
		fmt.Fprintf(os.Stderr, "synth: the linear layers are FP8 (F8_E4M3 with weight_scale), the rest BF16\n")
	}
	fmt.Fprintf(os.Stderr, "synth: %s (%s, random weights, seed %d) -> %s, %.2f GB\n", name, dtype, *seed, *out, float64(total)/1e9)
	bar := newProgress("writing", total, *quiet)
	defer bar.Finish()
	if toHF {
		if err := format.WriteHF(*out, contents, dtype, tensors, 0, bar.Update); err != nil {
			return err
		}
		return writeHFTokenizer(*out, *tokPath, vocab)
	}
	return format.WriteGGUF(*out, contents, dtype, tensors, bar.Update)
}

// writeHFTokenizer puts the tokenizer beside a Hugging Face model: a given tokenizer.json
// (and the tokenizer_config.json beside it) is copied; a vocabulary without one cannot be
// written as tokenizer.json and is left out with a note.
func writeHFTokenizer(dir, tokPath string, vocab *tokenizer.Vocab) error {
	if strings.HasSuffix(tokPath, ".json") {
		if err := copyFile(tokPath, filepath.Join(dir, "tokenizer.json")); err != nil {
			return err
		}
		cfg := filepath.Join(filepath.Dir(tokPath), "tokenizer_config.json")
		if _, err := os.Stat(cfg); err == nil {
			return copyFile(cfg, filepath.Join(dir, "tokenizer_config.json"))
		}
		return nil
	}
	if err := format.WriteHFTokenizer(dir, vocab, ""); err != nil {
		fmt.Fprintf(os.Stderr, "synth: no tokenizer.json written (%v); pass --tokenizer tokenizer.json to attach one\n", err)
	}
	return nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// quantizeFP8 turns the linear layers' BF16 tensors into quant.FP8 ones held in memory
// (model.QuantizeFP8, as --quantization fp8 quantizes them at load), one tensor at a time.
func quantizeFP8(tensors []format.OutTensor) error {
	for i := range tensors {
		t := &tensors[i]
		if !model.FP8Linear(t.Name) || len(t.Shape) != 2 {
			continue
		}
		var buf bytes.Buffer
		if t.Data != nil {
			buf.Write(t.Data)
		} else if err := t.Write(&buf); err != nil {
			return err
		}
		q, err := model.QuantizeFP8(&format.Tensor{Name: t.Name, Type: t.Type, Shape: t.Shape, Data: buf.Bytes()})
		if err != nil {
			return err
		}
		t.Type, t.Data, t.Write = quant.FP8, q.Data, nil
	}
	return nil
}
