package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Expressions of tokenizer.json Split pre-tokenizers, as the families' files spell them.
const (
	hfRegexO200kWords = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`
	hfRegexGPT4o      = hfRegexO200kWords + `|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	hfRegexTekken     = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	hfRegexQwen35     = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	hfRegexSeedCoder  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+`
	hfRegexBailingMoE = `'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`
	hfRegexExaoneMoE  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+`
	hfRegexBloom      = ` ?[^(\s|.,!?…。，、।۔،)]+`
	hfRegexDeepSeekV3 = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
	hfRegexCJKKana    = `[一-龥぀-ゟ゠-ヿ]+`
	// hfRegexCL100k is GPT-4's cl100k expression as tokenizer.json files write it (DBRX):
	// Llama 3's split, with possessive quantifiers that change no match.
	hfRegexCL100k = `'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`
)

// hfWholeCover lists the expressions whose matches cover every text, leaving no gaps: for
// them Split's Removed behavior with invert (keep the matches, drop the rest), as o200k and
// cl100k tokenizer.json files use, is the Isolated split.
var hfWholeCover = map[string]bool{
	hfRegexGPT2: true, hfRegexLlama3: true, hfRegexQwen2: true, hfRegexGPT4o: true, hfRegexTekken: true,
	hfRegexQwen35: true, hfRegexSeedCoder: true, hfRegexBailingMoE: true, hfRegexExaoneMoE: true,
	hfRegexCL100k: true,
}

// hfSplits maps each Split expression kvasir implements to its split, for tokenizer.json
// pre-tokenizers that compose them in ways no tokenizer.ggml.pre name does.
var hfSplits = map[string]preTokenizer{
	hfRegexGPT2:               splitGPT2,
	hfRegexLlama3:             splitLlama3,
	hfRegexCL100k:             splitLlama3,
	hfRegexQwen2:              splitQwen2,
	hfRegexGPT4o:              splitGPT4o,
	hfRegexTekken:             splitTekken,
	hfRegexQwen35:             splitQwen35,
	hfRegexSeedCoder:          splitSeedCoder,
	hfRegexBailingMoE:         splitQwen2,
	hfRegexExaoneMoE:          splitExaoneMoE,
	hfRegexBloom:              splitBloom,
	hfRegexDeepSeekV3:         alternation(deepSeekV3Rules...),
	hfRegexCJKKana:            alternation(run(isCJKKana)),
	`\p{N}{1,3}`:              alternation(atMost(isN, 3)),
	`\p{N}`:                   alternation(one(isN)),
	`\p{N}+`:                  alternation(run(isN)),
	`\d{1,3}(?=(?:\d{3})*\b)`: splitDigitsBeforeBoundary,
	`[0-9][0-9][0-9]`:         alternation(exactly(isASCIIDigit, 3)),
	"[\r\n]":                  alternation(one(isBreak)),
	`\s?\p{L}+`:               alternation(spacePrefixed(isL)),
	`\s?\p{P}+`:               alternation(spacePrefixed(isP)),
}

// hfPreNames maps the Split expressions (in order) of a tokenizer.json pre-tokenizer to the
// tokenizer.ggml.pre name of the same split.
var hfPreNames = []struct {
	name    string
	regexes []string
}{
	{"gpt-2", []string{hfRegexGPT2}},
	{"llama-bpe", []string{hfRegexLlama3}},
	{"dbrx", []string{hfRegexCL100k}},
	{"qwen2", []string{hfRegexQwen2}},
	{"deepseek-llm", hfDeepSeekLLMRegexes},
	{"deepseek-coder", []string{"[\r\n]", `\s?\p{L}+`, `\s?\p{P}+`, "[一-龥ࠀ-一가-퟿]+", `\p{N}`}},
	{"deepseek-v3", []string{`\p{N}{1,3}`, hfRegexCJKKana, hfRegexDeepSeekV3}},
	{"gpt-4o", []string{hfRegexGPT4o}},
	{"tekken", []string{hfRegexTekken}},
	{"qwen35", []string{hfRegexQwen35}},
	{"seed-coder", []string{hfRegexSeedCoder}},
	{"bailingmoe", []string{hfRegexBailingMoE}},
	{"exaone-moe", []string{hfRegexExaoneMoE}},
	{"bloom", []string{hfRegexBloom}},
	{"tiny_aya", []string{`\d{1,3}(?=(?:\d{3})*\b)`, hfRegexGPT4o}},
}

// preNameForSteps returns the tokenizer.ggml.pre name whose split is that of steps, or "".
func preNameForSteps(steps []PreStep) string {
	switch {
	case len(steps) == 1 && steps[0] == PreStep{Type: "ByteLevel", UseRegex: true}:
		return "gpt-2"
	case len(steps) == 2 && steps[0] == PreStep{Type: "Digits", IndividualDigits: true} &&
		steps[1] == PreStep{Type: "ByteLevel", UseRegex: true}:
		return "starcoder"
	}
	var regexes []string
	for _, s := range steps {
		if s.Type != "Split" {
			return ""
		}
		regexes = append(regexes, s.Pattern)
	}
	for _, k := range hfPreNames {
		if slices.Equal(k.regexes, regexes) {
			return k.name
		}
	}
	return ""
}

// buildPreSteps returns the split of a sequence of tokenizer.json pre-tokenizer steps.
func buildPreSteps(steps []PreStep) (preTokenizer, error) {
	var splits []preTokenizer
	for _, s := range steps {
		switch s.Type {
		case "Split":
			split, ok := hfSplits[s.Pattern]
			if !ok {
				return nil, fmt.Errorf("unknown pre-tokenizer expression %q", s.Pattern)
			}
			splits = append(splits, split)
		case "Digits":
			if s.IndividualDigits {
				splits = append(splits, alternation(one(isN)))
			} else {
				splits = append(splits, alternation(run(isN)))
			}
		case "Punctuation":
			splits = append(splits, alternation(one(isHFPunct)))
		case "ByteLevel":
			splits = append(splits, byteLevelStep(s.AddPrefixSpace, s.UseRegex))
		default:
			return nil, fmt.Errorf("pre-tokenizer step %q is not supported", s.Type)
		}
	}
	if len(splits) == 0 {
		return func(s string, yield func(string)) { yield(s) }, nil
	}
	return sequence(splits...), nil
}

// isHFPunct is HF's Punctuation pre-tokenizer class: ASCII punctuation and symbols, and
// Unicode punctuation.
func isHFPunct(r rune) bool { return isASCIIPunct(r) || isP(r) }

// byteLevelStep is HF's ByteLevel pre-tokenizer on one piece: with addPrefixSpace a space
// goes before a piece that does not start with one (the words then differ from the text),
// and with useRegex the piece is split by GPT-2's expression.
func byteLevelStep(addPrefixSpace, useRegex bool) preTokenizer {
	return func(s string, yield func(string)) {
		if addPrefixSpace && !strings.HasPrefix(s, " ") {
			s = " " + s
		}
		if useRegex {
			splitGPT2(s, yield)
			return
		}
		yield(s)
	}
}

// normalize applies the normalizer steps to s in order.
func normalize(steps []Normalizer, s string) string {
	for _, n := range steps {
		switch n.Type {
		case "NFC":
			s = norm.NFC.String(s)
		case "NFKC":
			s = norm.NFKC.String(s)
		case "NFD":
			s = norm.NFD.String(s)
		case "NFKD":
			s = norm.NFKD.String(s)
		case "Lowercase":
			s = strings.ToLower(s)
		case "StripAccents":
			s = strings.Map(func(r rune) rune {
				if unicode.Is(unicode.Mn, r) {
					return -1
				}
				return r
			}, s)
		case "Strip":
			if n.Left {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if n.Right {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
		case "Replace":
			s = strings.ReplaceAll(s, n.Old, n.New)
		case "Prepend":
			if s != "" {
				s = n.New + s
			}
		}
	}
	return s
}
