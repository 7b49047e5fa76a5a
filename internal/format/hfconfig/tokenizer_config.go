package hfconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
)

// TokenizerConfig holds the fields of tokenizer_config.json that matter outside the
// tokenizer itself.
type TokenizerConfig struct {
	// ChatTemplate is the Jinja chat template: the string, or the one named "default" from a
	// list of named templates. Empty when there is none.
	ChatTemplate string
	// ChatTemplates holds every named template when the file gives a list (nil otherwise).
	ChatTemplates map[string]string
	// Special token strings; empty when absent or null.
	BOSToken, EOSToken, PadToken, UnkToken string
	// AddBOSToken and AddEOSToken are nil when the file does not say.
	AddBOSToken, AddEOSToken *bool
	// ModelMaxLength is the longest input the tokenizer is meant for; 0 when absent or set
	// to transformers' "very large" placeholder.
	ModelMaxLength int
	// TokenizerClass is the tokenizer_class entry, such as "Qwen2Tokenizer".
	TokenizerClass string
}

// tokenizerConfigJSON is tokenizer_config.json as written on disk.
type tokenizerConfigJSON struct {
	ChatTemplate   json.RawMessage `json:"chat_template"`
	BOSToken       specialToken    `json:"bos_token"`
	EOSToken       specialToken    `json:"eos_token"`
	PadToken       specialToken    `json:"pad_token"`
	UnkToken       specialToken    `json:"unk_token"`
	AddBOSToken    *bool           `json:"add_bos_token"`
	AddEOSToken    *bool           `json:"add_eos_token"`
	ModelMaxLength *float64        `json:"model_max_length"`
	TokenizerClass string          `json:"tokenizer_class"`
}

// specialToken decodes a token written as a string, as null, or as an AddedToken object
// {"content": "...", ...}.
type specialToken string

func (s *specialToken) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*s = ""
		return nil
	case len(b) > 0 && b[0] == '{':
		var obj struct {
			Content *string `json:"content"`
		}
		if err := json.Unmarshal(b, &obj); err != nil {
			return err
		}
		if obj.Content == nil {
			return fmt.Errorf("token object has no content")
		}
		*s = specialToken(*obj.Content)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return err
	}
	*s = specialToken(str)
	return nil
}

// ReadTokenizerConfig reads and parses the tokenizer_config.json at path.
func ReadTokenizerConfig(path string) (*TokenizerConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hfconfig: %w", err)
	}
	t, err := ParseTokenizerConfig(data)
	if err != nil {
		return nil, fmt.Errorf("hfconfig %s: %w", path, err)
	}
	return t, nil
}

// ParseTokenizerConfig parses tokenizer_config.json.
func ParseTokenizerConfig(data []byte) (*TokenizerConfig, error) {
	var j tokenizerConfigJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	t := &TokenizerConfig{
		BOSToken:       string(j.BOSToken),
		EOSToken:       string(j.EOSToken),
		PadToken:       string(j.PadToken),
		UnkToken:       string(j.UnkToken),
		AddBOSToken:    j.AddBOSToken,
		AddEOSToken:    j.AddEOSToken,
		TokenizerClass: j.TokenizerClass,
	}
	// transformers writes int(1e30) when there is no limit; treat anything beyond int32 so.
	if l := j.ModelMaxLength; l != nil && *l > 0 && *l <= math.MaxInt32 {
		t.ModelMaxLength = int(*l)
	}
	if err := t.parseChatTemplate(j.ChatTemplate); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: chat_template: %w", err)
	}
	return t, nil
}

// parseChatTemplate accepts a string, null, or a list of {"name", "template"} objects.
func (t *TokenizerConfig) parseChatTemplate(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] != '[' {
		return json.Unmarshal(raw, &t.ChatTemplate)
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return err
	}
	t.ChatTemplates = make(map[string]string, len(list))
	for i, e := range list {
		if e.Name == nil || e.Template == nil {
			return fmt.Errorf("entry %d lacks a name or a template", i)
		}
		t.ChatTemplates[*e.Name] = *e.Template
	}
	t.ChatTemplate = t.ChatTemplates["default"]
	return nil
}

// Marshal returns tokenizer_config.json text holding these fields (with the chat template as
// a plain string, or as a named list when ChatTemplates is set).
func (t *TokenizerConfig) Marshal() ([]byte, error) {
	m := map[string]any{}
	str := func(key, v string) {
		if v != "" {
			m[key] = v
		} else {
			m[key] = nil
		}
	}
	str("bos_token", t.BOSToken)
	str("eos_token", t.EOSToken)
	str("pad_token", t.PadToken)
	str("unk_token", t.UnkToken)
	if t.AddBOSToken != nil {
		m["add_bos_token"] = *t.AddBOSToken
	}
	if t.AddEOSToken != nil {
		m["add_eos_token"] = *t.AddEOSToken
	}
	if t.ModelMaxLength > 0 {
		m["model_max_length"] = t.ModelMaxLength
	}
	if t.TokenizerClass != "" {
		m["tokenizer_class"] = t.TokenizerClass
	}
	switch {
	case len(t.ChatTemplates) > 0:
		type named struct {
			Name     string `json:"name"`
			Template string `json:"template"`
		}
		var list []named
		for _, name := range sortedKeys(t.ChatTemplates) {
			list = append(list, named{name, t.ChatTemplates[name]})
		}
		m["chat_template"] = list
	case t.ChatTemplate != "":
		m["chat_template"] = t.ChatTemplate
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // templates are full of < and >
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("hfconfig: tokenizer config: %w", err)
	}
	return buf.Bytes(), nil
}

// sortedKeys returns the keys of m in sorted order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
