package tokenizer

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestVocabFromHFPreNames: tokenizer.json pre-tokenizers that some tokenizer.ggml.pre name
// describes get that name.
func TestVocabFromHFPreNames(t *testing.T) {
	for _, c := range []struct{ pre, want string }{
		{hfPreSplit(hfRegexGPT4o), "gpt-4o"},
		{hfPreSplit(hfRegexTekken), "tekken"},
		{hfPreSplit(`\p{N}{1,3}`, hfRegexCJKKana, hfRegexDeepSeekV3), "deepseek-v3"},
		{hfPreSplit("[\r\n]", `\s?\p{L}+`, `\s?\p{P}+`, "[一-龥ࠀ-一가-퟿]+", `\p{N}`), "deepseek-coder"},
		{`{"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},
			{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]}`, "starcoder"},
	} {
		v, err := VocabFromHF(hfTiny(t, false, c.pre, "null"), nil)
		if err != nil {
			t.Errorf("%s: %v", c.want, err)
			continue
		}
		if v.Pre != c.want || v.PreSteps != nil {
			t.Errorf("%s: pre %q, steps %v", c.want, v.Pre, v.PreSteps)
		}
	}
}

// TestHFPreSteps checks compositions no name describes, on vectors worked out by hand.
func TestHFPreSteps(t *testing.T) {
	for _, c := range []struct {
		steps []PreStep
		text  string
		want  []string
	}{
		// Digit runs split out; then each piece gets a space before it and GPT-2's split.
		{[]PreStep{{Type: "Digits"}, {Type: "ByteLevel", AddPrefixSpace: true, UseRegex: true}},
			"ab12 cd", []string{" ab", " 12", " cd"}},
		// Every digit alone, then no regex: pieces kept.
		{[]PreStep{{Type: "Digits", IndividualDigits: true}}, "x12", []string{"x", "1", "2"}},
		// Punctuation alone, then digits in runs of at most three.
		{[]PreStep{{Type: "Punctuation"}, {Type: "Split", Pattern: `\p{N}{1,3}`}},
			"a,b1234", []string{"a", ",", "b", "123", "4"}},
		{[]PreStep{{Type: "ByteLevel"}}, "a b", []string{"a b"}},
	} {
		split, err := buildPreSteps(c.steps)
		if err != nil {
			t.Fatal(err)
		}
		if got := collectWords(split, c.text); !slices.Equal(got, c.want) {
			t.Errorf("%v on %q: got %q, want %q", c.steps, c.text, got, c.want)
		}
	}
	if _, err := buildPreSteps([]PreStep{{Type: "Split", Pattern: `\w+`}}); err == nil || !strings.Contains(err.Error(), `\\w+`) {
		t.Errorf("unknown expression: err = %v", err)
	}
}

// TestVocabFromHFPreStepsEncode: ByteLevel's add_prefix_space and a normalizer, end to end.
func TestVocabFromHFPreStepsEncode(t *testing.T) {
	js := hfTiny(t, false, `{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}`, "null")
	v, err := VocabFromHF(js, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Pre != "" || len(v.PreSteps) != 1 {
		t.Fatalf("pre %q steps %v", v.Pre, v.PreSteps)
	}
	tok, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	// " hi" is one token (Ġhi, 257): the space comes from add_prefix_space.
	if got := tok.Encode("hi hi", EncodeOptions{}); !slices.Equal(got, []int{257, 257}) {
		t.Errorf("add_prefix_space: got %v", got)
	}

	norm := `"normalizer": {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "Prepend", "prepend": " "}]}`
	js = bytes.Replace(hfTiny(t, false, hfPreGPT2, "null"), []byte(`"normalizer": null`), []byte(norm), 1)
	if v, err = VocabFromHF(js, nil); err != nil {
		t.Fatal(err)
	}
	if tok, err = New(v); err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("HI", EncodeOptions{}); !slices.Equal(got, []int{257}) {
		t.Errorf("lowercase + prepend: got %v, want [257]", got)
	}
}

func TestNormalize(t *testing.T) {
	steps := []Normalizer{{Type: "Strip", Left: true, Right: true}, {Type: "Lowercase"},
		{Type: "Replace", Old: "x", New: "y"}, {Type: "Prepend", New: "#"}, {Type: "NFKC"}}
	// strip -> "ＡxB"; lower -> "ａxb"; replace -> "ａyb"; prepend -> "#ａyb"; NFKC -> "#ayb".
	if got := normalize(steps, "  ＡxB \t"); got != "#ayb" {
		t.Errorf("got %q", got)
	}
	if got := normalize([]Normalizer{{Type: "NFD"}, {Type: "StripAccents"}}, "café"); got != "cafe" {
		t.Errorf("strip accents: %q", got)
	}
	if got := normalize([]Normalizer{{Type: "Prepend", New: "▁"}}, ""); got != "" {
		t.Errorf("prepend to nothing: %q", got)
	}
}

func TestVocabFromHFUnsupported(t *testing.T) {
	for _, c := range []struct{ pre, norm, want string }{
		{`{"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed"}`, "null", `"Removed"`},
		{hfPreSplit(`\w+|\s+`), "null", `\\w+|\\s+`},
		{hfPreGPT2, `{"type": "Precompiled", "precompiled_charsmap": ""}`, `"Precompiled"`},
		{hfPreGPT2, `{"type": "Replace", "pattern": {"Regex": " +"}, "content": " "}`, "Replace"},
	} {
		js := bytes.Replace(hfTiny(t, false, c.pre, "null"), []byte(`"normalizer": null`), []byte(`"normalizer": `+c.norm), 1)
		_, err := VocabFromHF(js, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s / %s: err = %v, want one naming %s", c.pre, c.norm, err, c.want)
		}
	}
}

// TestVocabFromHFMetaspace: the prepend scheme decides the space prefix; a replacement other
// than "▁" is refused by name.
func TestVocabFromHFMetaspace(t *testing.T) {
	for _, c := range []struct {
		pre    string
		prefix bool
		err    string
	}{
		{`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}`, true, ""},
		{`{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"}`, false, ""},
		{`{"type": "Metaspace", "replacement": "▁", "add_prefix_space": false}`, false, ""},
		{`{"type": "Metaspace", "replacement": "_"}`, false, `"_"`},
	} {
		js := strings.Replace(hfSentencePieceTiny, `"pre_tokenizer": null`, `"pre_tokenizer": `+c.pre, 1)
		js = strings.Replace(js, `{"type": "Prepend", "prepend": "▁"}, `, "", 1)
		v, err := VocabFromHF([]byte(js), nil)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err = %v", c.pre, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if v.AddSpacePrefix != c.prefix {
			t.Errorf("%s: space prefix %v", c.pre, v.AddSpacePrefix)
		}
	}
}

// atomic rewrites the possessive quantifiers of tokenizer.json expressions as the atomic
// groups the oracle's engine knows.
func atomic(re string) string {
	return strings.NewReplacer(`[^\r\n\p{L}\p{N}]?+`, `(?>[^\r\n\p{L}\p{N}]?)`,
		`[^\s\p{L}\p{N}]++`, `(?>[^\s\p{L}\p{N}]+)`).Replace(re)
}

// TestHFWholeCover checks that the expressions said to cover every text leave no gap on
// random texts (so Split's Removed-with-invert keeps everything), and that cl100k's
// possessive form splits as Llama 3's scanner does.
func TestHFWholeCover(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var texts []string
	for i := 0; i < 300; i++ {
		data := make([]byte, 1+rng.IntN(24))
		for k := range data {
			data[k] = byte(rng.UintN(256))
		}
		texts = append(texts, pretokInput(data))
	}
	for re := range hfWholeCover {
		o := newOracle(t, atomic(re))
		for _, text := range texts {
			locs, err := o[0].FindAllStringIndex(text, -1)
			if err != nil {
				t.Fatal(err)
			}
			at := 0
			for _, l := range locs {
				if l[0] != at {
					t.Fatalf("%s leaves %q uncovered in %q", re, text[at:l[0]], text)
				}
				at = l[1]
			}
			if at != len(text) {
				t.Fatalf("%s leaves %q uncovered", re, text[at:])
			}
		}
	}
	fam := pretokFamily{"cl100k", hfSplits[hfRegexCL100k], []string{atomic(hfRegexCL100k)}}
	o := newOracle(t, fam.exprs...)
	for _, text := range texts {
		checkPretok(t, fam, o, text)
	}
	pre := `{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ` + jsonString(hfRegexGPT4o) +
		`}, "behavior": "Removed", "invert": true}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}`
	v, err := VocabFromHF(hfTiny(t, false, pre, "null"), nil)
	if err != nil || v.Pre != "gpt-4o" {
		t.Errorf("o200k with Removed+invert: pre %v, err %v", v, err)
	}
	if v, err := VocabFromHF(hfTiny(t, false, hfPreSplit(hfRegexCL100k), "null"), nil); err != nil || v.Pre != "dbrx" {
		t.Errorf("cl100k: %v", err)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
