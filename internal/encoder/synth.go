package encoder

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/format/safetensors"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// Synthesized encoders: random weights of BERT shapes with a small WordPiece vocabulary,
// written as GGUF or as a Hugging Face folder, so that tests and oracles need no download.

// shapes are the synthesized encoder shapes; VocabSize is the synthesized vocabulary's.
var shapes = map[string]Config{
	// bge-small-en-v1.5's structure (CLS pooling, 2 token types, post-norm GELU blocks),
	// scaled down.
	"bert-tiny": {Arch: "bert", Dim: 128, Layers: 2, Heads: 4, FFNDim: 512, MaxPositions: 512, TypeVocab: 2,
		NormEps: 1e-12, Pooling: backend.PoolCLS},
	// bert-tiny as a cross-encoder (BertForSequenceClassification with one label).
	"bert-tiny-reranker": {Arch: "bert", Dim: 128, Layers: 2, Heads: 4, FFNDim: 512, MaxPositions: 512, TypeVocab: 2,
		NormEps: 1e-12, Pooling: backend.PoolCLS, Labels: 1, Pooler: true},
	// bge-small-en-v1.5's geometry.
	"bge-small": {Arch: "bert", Dim: 384, Layers: 12, Heads: 12, FFNDim: 1536, MaxPositions: 512, TypeVocab: 2,
		NormEps: 1e-12, Pooling: backend.PoolCLS},
	// nomic-embed-text-v1.5's structure (rotary base 1000, fused qkv, SwiGLU, mean
	// pooling, no biases), scaled down.
	"nomic-bert-tiny": {Arch: ArchNomic, Dim: 128, Layers: 2, Heads: 4, FFNDim: 384, MaxPositions: 2048, TypeVocab: 2,
		NormEps: 1e-12, RopeTheta: 1000, Pooling: backend.PoolMean},
	// jina-embeddings-v2-small-en's structure (ALiBi, GEGLU, mean pooling), scaled down.
	"jina-bert-v2-tiny": {Arch: ArchJina, Dim: 128, Layers: 2, Heads: 4, FFNDim: 512, MaxPositions: 8192, TypeVocab: 2,
		NormEps: 1e-12, MaxALiBi: 8, Pooling: backend.PoolMean},
	// jina-bert-v2-tiny with the optional norms: LayerNorms on q and k and a second one
	// after attention, and 6 heads (ALiBi slopes of a head count that is no power of two).
	"jina-bert-v2-tiny-norms": {Arch: ArchJina, Dim: 96, Layers: 2, Heads: 6, FFNDim: 256, MaxPositions: 8192, TypeVocab: 2,
		NormEps: 1e-12, MaxALiBi: 8, QKNorm: true, AttnNorm2: true, Pooling: backend.PoolMean},
}

// SynthShapes lists the synthesized encoder shapes.
func SynthShapes() []string {
	var names []string
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// SynthConfig returns the Config of a synthesized shape with the synthesized vocabulary.
func SynthConfig(name string) (Config, bool) {
	c, ok := shapes[strings.ToLower(name)]
	c.VocabSize = len(SynthVocab().Tokens)
	return c, ok
}

// synthWords are the whole words of the synthesized vocabulary.
var synthWords = strings.Fields(`the of and to in is it that for on with as was at by be this are from or
an not but have what which they you we can all one there their has had more when will about if no out
so up its into than them only other new some time could these two may first then do any like my now
over such our man me even most made after also did many before must through back years where much
your way well down should because each just those people how too little state good very make world
still own see men work long get here between both life being under never day same another know while
last might us great old year off come since against go came right used take three paris capital france
city river sun cat dog quick brown fox jumps lazy hello embedding model search query document`)

// SynthVocab returns the synthesized WordPiece vocabulary in GGUF form (word-start pieces
// carry "▁"): the five BERT specials, every letter, digit and punctuation mark as a word
// start and as a continuation, and a few hundred English words.
func SynthVocab() *tokenizer.Vocab {
	toks := []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
	types := []tokenizer.TokenType{tokenizer.TypeControl, tokenizer.TypeUnknown, tokenizer.TypeControl, tokenizer.TypeControl, tokenizer.TypeControl}
	for _, c := range "abcdefghijklmnopqrstuvwxyz0123456789.,!?'-:;()\"" {
		toks = append(toks, "▁"+string(c), string(c))
	}
	seen := map[string]bool{}
	for _, w := range synthWords {
		if !seen[w] && len(w) > 1 {
			seen[w] = true
			toks = append(toks, "▁"+w)
		}
	}
	for len(types) < len(toks) {
		types = append(types, tokenizer.TypeNormal)
	}
	return &tokenizer.Vocab{Model: "bert", Tokens: toks, Types: types,
		BOS: 2, EOS: 3, UNK: 1, PAD: 0, SEP: 3, CLS: 2, MASK: 4, EOT: -1, AddBOS: true, AddEOS: true}
}

// synthTensor makes one tensor's values, deterministic for the seed and the name: LayerNorm
// weights near 1, biases and embeddings small, matrices scaled by their fan-in.
func synthTensor(name string, shape []int, seed uint64) []float32 {
	h := fnv.New64a()
	h.Write([]byte(name))
	r := rand.New(rand.NewPCG(seed, h.Sum64()))
	n := 1
	for _, d := range shape {
		n *= d
	}
	vals := make([]float32, n)
	scale := 0.02
	switch {
	case len(shape) == 2 && !strings.Contains(name, "embd") && name != "token_types.weight":
		scale = 1 / math.Sqrt(float64(shape[1]))
	case strings.HasSuffix(name, "norm.weight"):
		for i := range vals {
			vals[i] = float32(1 + 0.1*r.NormFloat64())
		}
		return vals
	case len(shape) == 2:
		scale = 0.5
	}
	for i := range vals {
		vals[i] = float32(scale * r.NormFloat64())
	}
	return vals
}

func f32Bytes(vals []float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// WriteSynth writes a synthesized encoder of shape c (VocabSize from SynthVocab) with
// weights from seed: a GGUF file when path ends in .gguf, else a Hugging Face folder
// (config.json, model.safetensors, tokenizer.json, and for embedding models
// sentence-transformers' 1_Pooling/config.json; BertModel's, NomicBertModel's or
// JinaBertModel's). Nothing partial is left at path.
func WriteSynth(path, name string, c Config, seed uint64) error {
	v := SynthVocab()
	c.VocabSize = len(v.Tokens)
	if err := c.check(); err != nil {
		return err
	}
	type tensor struct {
		name  string
		shape []int
		data  []byte
	}
	var ts []tensor
	for _, t := range tensorShapes(c, true) {
		ts = append(ts, tensor{t.name, t.shape, f32Bytes(synthTensor(t.name, t.shape, seed))})
	}
	if strings.HasSuffix(path, ".gguf") {
		kvs := ggufMetadata(name, c, v)
		wts := make([]gguf.WriterTensor, len(ts))
		for i, t := range ts {
			dims := make([]uint64, len(t.shape))
			for j, d := range t.shape {
				dims[len(t.shape)-1-j] = uint64(d)
			}
			wts[i] = gguf.WriterTensor{Name: t.name, Type: quant.F32, Dims: dims, Data: t.data}
		}
		return gguf.WriteFile(path, kvs, wts, nil)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(path)), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var sts []safetensors.WriteTensor
	data := map[string][]byte{}
	for _, t := range ts {
		data[t.name] = t.data
	}
	for _, t := range ts {
		hf, ok := hfName(t.name, c.Labels > 0)
		switch c.Arch {
		case ArchNomic:
			hf, ok = nomicHFName(t.name)
		case ArchJina:
			// The gate's and up projection's rows are one matrix, the gate's first.
			up, isGate := strings.CutSuffix(t.name, "ffn_gate.weight")
			if strings.HasSuffix(t.name, "ffn_up.weight") {
				continue
			}
			if isGate {
				t.name, t.shape = up+"ffn_gate_up.weight", []int{2 * t.shape[0], t.shape[1]}
				t.data = append(slices.Clone(t.data), data[up+"ffn_up.weight"]...)
			}
			hf, ok = jinaHFName(t.name)
		}
		if !ok {
			return fmt.Errorf("tensor %s has no Hugging Face name", t.name)
		}
		sts = append(sts, safetensors.WriteTensor{Name: hf, DType: safetensors.F32, Shape: t.shape, Data: t.data})
	}
	if err := safetensors.Write(filepath.Join(tmp, safetensors.SingleFileName), sts, map[string]string{"format": "pt"}, nil); err != nil {
		return err
	}
	if err := writeHFFiles(tmp, c, v); err != nil {
		return err
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("synth %s: already exists", path)
	}
	return os.Rename(tmp, path)
}

// ggufMetadata is llama.cpp's metadata of a "bert", "nomic-bert" or "jina-bert-v2" model.
func ggufMetadata(name string, c Config, v *tokenizer.Vocab) []gguf.KV {
	a := c.Arch + "."
	u := func(key string, n int) gguf.KV { return gguf.KV{Key: a + key, Value: gguf.Uint32(uint32(n))} }
	pooling := map[backend.PoolMode]int{backend.PoolMean: 1, backend.PoolCLS: 2, backend.PoolLast: 3}[c.Pooling]
	if c.Labels > 0 {
		pooling = 4 // rank
	}
	kvs := []gguf.KV{
		u("context_length", c.MaxPositions), u("embedding_length", c.Dim), u("block_count", c.Layers),
		u("feed_forward_length", c.FFNDim), u("attention.head_count", c.Heads),
		{Key: a + "attention.layer_norm_epsilon", Value: gguf.Float32(float32(c.NormEps))},
		{Key: a + "attention.causal", Value: gguf.Bool(false)},
		u("pooling_type", pooling),
	}
	if c.TypeVocab > 0 {
		// llama.cpp sizes token_types.weight by it.
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.token_type_count", Value: gguf.Uint32(uint32(c.TypeVocab))})
	}
	if c.Arch == ArchNomic {
		kvs = append(kvs, gguf.KV{Key: a + "rope.freq_base", Value: gguf.Float32(float32(c.RopeTheta))})
	}
	// The general.* and tokenizer.* keys are those every kvasir GGUF carries.
	var out []gguf.KV
	for _, kv := range (format.Contents{Name: name, Config: format.Config{Arch: c.Arch}, Vocab: v}).GGUFMetadata(quant.F32) {
		if !strings.HasPrefix(kv.Key, a) {
			out = append(out, kv)
		}
	}
	return append(out, kvs...)
}

// writeHFFiles writes config.json, tokenizer.json, tokenizer_config.json and (for an
// embedding model) 1_Pooling/config.json into dir.
func writeHFFiles(dir string, c Config, v *tokenizer.Vocab) error {
	arch := "BertModel"
	cfg := map[string]any{
		"architectures": []string{arch}, "model_type": "bert", "vocab_size": c.VocabSize,
		"hidden_size": c.Dim, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"intermediate_size": c.FFNDim, "max_position_embeddings": c.MaxPositions,
		"type_vocab_size": c.TypeVocab, "layer_norm_eps": c.NormEps, "hidden_act": "gelu",
		"position_embedding_type": "absolute", "hidden_dropout_prob": 0.0,
		"attention_probs_dropout_prob": 0.0, "pad_token_id": v.PAD, "torch_dtype": "float32",
	}
	if c.Arch == ArchNomic {
		// NomicBertModel's own config (GPT-2's names), as nomic-embed-text-v1.5's.
		cfg = map[string]any{
			"architectures": []string{"NomicBertModel"}, "model_type": "nomic_bert", "vocab_size": c.VocabSize,
			"n_embd": c.Dim, "n_layer": c.Layers, "n_head": c.Heads, "n_inner": c.FFNDim,
			"n_positions": c.MaxPositions, "max_trained_positions": c.MaxPositions, "type_vocab_size": c.TypeVocab,
			"layer_norm_epsilon": c.NormEps, "activation_function": "swiglu", "rotary_emb_base": c.RopeTheta,
			"rotary_emb_fraction": 1.0, "rotary_emb_interleaved": false, "rotary_scaling_factor": nil,
			"rotary_emb_scale_base": nil, "qkv_proj_bias": false, "mlp_fc1_bias": false, "mlp_fc2_bias": false,
			"prenorm": false, "causal": false, "pad_token_id": v.PAD, "torch_dtype": "float32",
		}
	}
	if c.Arch == ArchJina {
		cfg["architectures"], cfg["position_embedding_type"], cfg["feed_forward_type"] = []string{"JinaBertModel"}, "alibi", "geglu"
	}
	if c.Labels > 0 {
		cfg["architectures"] = []string{"BertForSequenceClassification"}
		labels := map[string]string{}
		for i := range c.Labels {
			labels[fmt.Sprint(i)] = fmt.Sprintf("LABEL_%d", i)
		}
		cfg["id2label"] = labels
	}
	files := map[string]any{"config.json": cfg, "tokenizer.json": hfTokenizerJSON(v),
		"tokenizer_config.json": map[string]any{"tokenizer_class": "BertTokenizer", "do_lower_case": true,
			"cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]", "pad_token": "[PAD]", "mask_token": "[MASK]",
			"model_max_length": c.MaxPositions}}
	if c.Labels == 0 {
		files[filepath.Join("1_Pooling", "config.json")] = map[string]any{
			"word_embedding_dimension": c.Dim, "pooling_mode_cls_token": c.Pooling == backend.PoolCLS,
			"pooling_mode_mean_tokens": c.Pooling == backend.PoolMean, "pooling_mode_max_tokens": false,
			"pooling_mode_mean_sqrt_len_tokens": false, "pooling_mode_lasttoken": c.Pooling == backend.PoolLast}
	}
	for name, content := range files {
		b, err := json.MarshalIndent(content, "", "  ")
		if err != nil {
			return err
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// hfTokenizerJSON is the tokenizer.json of a GGUF-form WordPiece vocab: "▁x" is the word
// start "x", a piece without "▁" the continuation "##x".
func hfTokenizerJSON(v *tokenizer.Vocab) map[string]any {
	vocab := map[string]int{}
	var added []map[string]any
	for id, t := range v.Tokens {
		switch {
		case v.TypeOf(id) == tokenizer.TypeControl || v.TypeOf(id) == tokenizer.TypeUnknown:
			vocab[t] = id
			added = append(added, map[string]any{"id": id, "content": t, "single_word": false, "lstrip": false,
				"rstrip": false, "normalized": false, "special": true})
		case strings.HasPrefix(t, "▁"):
			vocab[strings.TrimPrefix(t, "▁")] = id
		default:
			vocab["##"+t] = id
		}
	}
	special := func(id string, n int) map[string]any {
		return map[string]any{"id": id, "ids": []int{n}, "tokens": []string{id}}
	}
	seq := func(id string, typ int) map[string]any {
		return map[string]any{"Sequence": map[string]any{"id": id, "type_id": typ}}
	}
	tok := func(id string, typ int) map[string]any {
		return map[string]any{"SpecialToken": map[string]any{"id": id, "type_id": typ}}
	}
	return map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added,
		"normalizer": map[string]any{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
			"strip_accents": nil, "lowercase": true},
		"pre_tokenizer": map[string]any{"type": "BertPreTokenizer"},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{tok("[CLS]", 0), seq("A", 0), tok("[SEP]", 0)},
			"pair":           []any{tok("[CLS]", 0), seq("A", 0), tok("[SEP]", 0), seq("B", 1), tok("[SEP]", 1)},
			"special_tokens": map[string]any{"[CLS]": special("[CLS]", v.CLS), "[SEP]": special("[SEP]", v.SEP)}},
		"decoder": map[string]any{"type": "WordPiece", "prefix": "##", "cleanup": true},
		"model": map[string]any{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
			"max_input_chars_per_word": 100, "vocab": vocab},
	}
}
