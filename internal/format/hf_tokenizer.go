package format

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"

	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// HFTokenizerJSON writes a SentencePiece-style vocabulary (Model "llama") as a Hugging Face
// tokenizer.json: a BPE model with byte fallback whose merges are derived from the pieces'
// scores, the way transformers converts SentencePiece models. Other vocabularies are
// refused with an error.
func HFTokenizerJSON(v *tokenizer.Vocab) ([]byte, error) {
	if v == nil || v.Model != "llama" {
		return nil, fmt.Errorf("tokenizer.json can only be derived here from a SentencePiece vocabulary")
	}
	ids := make(map[string]int, len(v.Tokens))
	for i, t := range v.Tokens {
		ids[t] = i
	}
	type merge struct {
		left, right string
		score       float32
		id          int
	}
	var merges []merge
	for id, t := range v.Tokens {
		if typ := v.TypeOf(id); typ != tokenizer.TypeNormal && typ != tokenizer.TypeUserDefined {
			continue
		}
		for i := range t {
			if i == 0 {
				continue
			}
			l, r := t[:i], t[i:]
			if _, ok := ids[l]; !ok {
				continue
			}
			if _, ok := ids[r]; !ok {
				continue
			}
			merges = append(merges, merge{l, r, v.ScoreOf(id), id})
		}
	}
	sort.SliceStable(merges, func(i, j int) bool {
		if merges[i].score != merges[j].score {
			return merges[i].score > merges[j].score
		}
		return merges[i].id < merges[j].id
	})
	mergeStrs := make([]string, len(merges))
	for i, m := range merges {
		mergeStrs[i] = m.left + " " + m.right
	}
	var added []map[string]any
	for id, t := range v.Tokens {
		if typ := v.TypeOf(id); typ == tokenizer.TypeControl || typ == tokenizer.TypeUnknown {
			added = append(added, map[string]any{
				"id": id, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
				"normalized": false, "special": true,
			})
		}
	}
	unk := ""
	if v.UNK >= 0 && v.UNK < len(v.Tokens) {
		unk = v.Tokens[v.UNK]
	}
	var normalizers []any
	if v.AddSpacePrefix {
		normalizers = append(normalizers, map[string]any{"type": "Prepend", "prepend": "▁"})
	}
	normalizers = append(normalizers, map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"})
	doc := map[string]any{
		"version":        "1.0",
		"truncation":     nil,
		"padding":        nil,
		"added_tokens":   added,
		"normalizer":     map[string]any{"type": "Sequence", "normalizers": normalizers},
		"pre_tokenizer":  nil,
		"post_processor": postProcessor(v),
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": unk, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
			"vocab": ids, "merges": mergeStrs,
		},
	}
	return json.MarshalIndent(doc, "", "  ")
}

// postProcessor returns the tokenizer.json post_processor that adds BOS and EOS the way
// the vocabulary asks, or nil when it adds neither.
func postProcessor(v *tokenizer.Vocab) any {
	if !v.AddBOS && !v.AddEOS {
		return nil
	}
	var single []any
	special := map[string]any{}
	add := func(id int) {
		text := v.Tokens[id]
		single = append(single, map[string]any{"SpecialToken": map[string]any{"id": text, "type_id": 0}})
		special[text] = map[string]any{"id": text, "ids": []int{id}, "tokens": []string{text}}
	}
	if v.AddBOS && v.BOS >= 0 && v.BOS < len(v.Tokens) {
		add(v.BOS)
	}
	single = append(single, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}})
	if v.AddEOS && v.EOS >= 0 && v.EOS < len(v.Tokens) {
		add(v.EOS)
	}
	return map[string]any{"type": "TemplateProcessing", "single": single, "pair": single, "special_tokens": special}
}

// WriteHFTokenizer writes tokenizer.json (derived from a SentencePiece vocabulary, see
// HFTokenizerJSON) and tokenizer_config.json (special tokens, BOS/EOS insertion and the
// chat template) into a Hugging Face model folder.
func WriteHFTokenizer(dir string, v *tokenizer.Vocab, chatTemplate string) error {
	data, err := HFTokenizerJSON(v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644); err != nil {
		return err
	}
	text := func(id int) string {
		if id >= 0 && id < len(v.Tokens) {
			return v.Tokens[id]
		}
		return ""
	}
	addBOS, addEOS := v.AddBOS, v.AddEOS
	tc := &hfconfig.TokenizerConfig{
		ChatTemplate: chatTemplate, BOSToken: text(v.BOS), EOSToken: text(v.EOS), UnkToken: text(v.UNK),
		PadToken: text(v.PAD), AddBOSToken: &addBOS, AddEOSToken: &addEOS,
	}
	cfg, err := tc.Marshal()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644)
}
