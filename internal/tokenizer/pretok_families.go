package tokenizer

// The split of each byte-level BPE model family, with the expression (or sequence of
// expressions) it implements, as the family's tokenizer.json spells it. Families whose
// expression is that of GPT-2, Llama 3, Qwen2 or DeepSeek LLM use those scanners (pretok.go).

var (
	// splitDefault is llama.cpp's split for a vocabulary that names no pre-tokenizer:
	//
	//	[\p{P}\$\+<=>\^~\|]+
	//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
	//	\p{N}+
	//	[0-9][0-9][0-9]
	splitDefault = sequence(
		alternation(run(func(r rune) bool { return isP(r) || isDefaultSymbol(r) })),
		splitGPT2,
		alternation(run(isN)),
		alternation(exactly(isASCIIDigit, 3)),
	)

	// splitFalcon is Falcon's:
	//
	//	[\p{P}\$\+<=>\^~\|`]+
	//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
	//	[0-9][0-9][0-9]
	splitFalcon = sequence(
		alternation(run(func(r rune) bool { return isP(r) || isDefaultSymbol(r) || r == '`' })),
		splitGPT2,
		alternation(exactly(isASCIIDigit, 3)),
	)

	// splitStarCoder is StarCoder's (also Refact, Command-R, SmolLM, CodeShell, EXAONE,
	// Minerva): single digits, then GPT-2's expression.
	//
	//	\p{N}
	//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
	splitStarCoder = sequence(alternation(one(isN)), splitGPT2)

	// splitQwen35 is Qwen3.5's, Qwen2's with marks joined to letters:
	//
	//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	splitQwen35 = alternation(
		contractions(true),
		prefixed(isLeadLN, isLM, nil, 0),
		one(isN),
		prefixed(isBlank, isOtherLMN, isBreak, -1),
		spaceToBreak, spaceNotBeforeWord, spaces,
	)

	// splitDeepSeekCoder is DeepSeek Coder's:
	//
	//	[\r\n]
	//	\s?\p{L}+
	//	\s?\p{P}+
	//	[一-龥ࠀ-一가-퟿]+
	//	\p{N}
	splitDeepSeekCoder = sequence(
		alternation(one(isBreak)),
		alternation(spacePrefixed(isL)),
		alternation(spacePrefixed(isP)),
		alternation(run(isDeepSeekCJK)),
		alternation(one(isN)),
	)

	// splitDeepSeekV3 is DeepSeek V3's (also Hunyuan dense, JoyAI):
	//
	//	\p{N}{1,3}
	//	[一-龥぀-ゟ゠-ヿ]+
	//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	splitDeepSeekV3 = sequence(
		alternation(atMost(isN, 3)),
		alternation(run(isCJKKana)),
		alternation(deepSeekV3Rules...),
	)

	// splitSpark25 is Spark 2.5's, DeepSeek V3's with bare punctuation and single line
	// breaks, then single digits:
	//
	//	\p{N}{1,3}
	//	[一-龥぀-ゟ゠-ヿ]+
	//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+
	//	\p{N}
	splitSpark25 = sequence(
		alternation(atMost(isN, 3)),
		alternation(run(isCJKKana)),
		alternation(
			punctThenLetters,
			prefixed(isLeadLPS, isLM, nil, 0),
			prefixed(isBlank, isPS, nil, 0),
			one(isBreak), spaceNotBeforeWord, spaces,
		),
		alternation(one(isN)),
	)

	// splitAFMoE is AFMoE's: digit runs in groups of three from the right, then a run of
	// CJK and other Asian scripts, then DeepSeek V3's last expression.
	//
	//	[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}\x{3040}-\x{30FF}\x{FF65}-\x{FF9F}\x{2F00}-\x{2FDF}\x{0E40}-\x{0EFF}
	//	 \x{1780}-\x{17FF}\x{1000}-\x{109F}\x{AA60}-\x{AA7F}\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+
	splitAFMoE = sequence(
		splitDigitsFromRight,
		alternation(run(inRanges(0x4E00, 0x9FFF, 0x3400, 0x4DBF, 0xF900, 0xFAFF, 0x3040, 0x30FF,
			0xFF65, 0xFF9F, 0x2F00, 0x2FDF, 0x0E40, 0x0EFF, 0x1780, 0x17FF, 0x1000, 0x109F,
			0xAA60, 0xAA7F, 0xA9E0, 0xA9FF, 0xAC00, 0xD7AF, 0x1100, 0x11FF))),
		alternation(deepSeekV3Rules...),
	)

	// splitBloom is BLOOM's (also Poro, GPT-3 Finnish): a word is everything up to a space
	// or one of a few punctuation marks (the parentheses and bar are members of the class).
	//
	//	 ?[^(\s|.,!?…。，、।۔،)]+
	splitBloom = alternation(blankPrefixed(not(isBloomStop)))

	// splitViking is Viking's, BLOOM's then single digits:
	//
	//	 ?[^(\s|.,!?…。，、।۔،)]+
	//	\p{N}
	splitViking = sequence(splitBloom, alternation(one(isN)))

	// splitGPT4o is GPT-4o's o200k expression (also Llama 4, Kanana 2, MiniMax M2):
	//
	//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
	splitGPT4o = alternation(o200kRules(caseSplit(isUpperish, isLowerish, true), 3, "\r\n/")...)

	// splitTekken is Mistral Tekken's, o200k without contractions and with single digits:
	//
	//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
	splitTekken = alternation(o200kRules(caseSplit(isUpperish, isLowerish, false), 1, "\r\n/")...)

	// splitTinyAya is Tiny Aya's: digits grouped by threes from the right, then o200k.
	//
	//	\d{1,3}(?=(?:\d{3})*\b)
	//	(o200k, as splitGPT4o)
	splitTinyAya = sequence(splitDigitsBeforeBoundary, splitGPT4o)

	// splitKimiK2 is Kimi K2's, o200k with Han runs split out first:
	//
	//	[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	splitKimiK2 = alternation(append([]rule{run(isHan)}, o200kRules(caseSplit(
		func(r rune) bool { return isUpperish(r) && !isHan(r) },
		func(r rune) bool { return isLowerish(r) && !isHan(r) }, true), 3, "\r\n")...)...)

	// splitYoutu is Youtu's: runs of Hangul, CJK punctuation, Bopomofo and CJK/kana, then
	// o200k with single digits.
	//
	//	[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+
	//	(o200k with \p{N} for \p{N}{1,3})
	splitYoutu = sequence(
		alternation(
			run(inRanges(0xAC00, 0xD7A3, 0x3131, 0x318E)),
			run(func(r rune) bool {
				return inSet("！…“”‘’—：；，")(r) || r >= 0x3001 && r <= 0x303F || r >= 0xFE30 && r <= 0xFE4F
			}),
			run(inRanges(0x3105, 0x312F)),
			run(isCJKKana),
		),
		alternation(o200kRules(caseSplit(isUpperish, isLowerish, true), 1, "\r\n/")...),
	)

	// splitSuperBPE is SuperBPE's: only digit runs are split out (words may span spaces),
	// in groups of three from the right.
	//
	//	\p{N}+
	//	(?=(\d{3})+(?!\d))
	splitSuperBPE = sequence(alternation(run(isN)), splitDigitGroups)

	// splitSeedCoder is Seed-Coder's, Qwen2's without line breaks after punctuation:
	//
	//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+
	splitSeedCoder = alternation(
		contractions(true),
		prefixed(isLeadLN, isL, nil, 0),
		one(isN),
		prefixed(isBlank, isOtherLN, nil, 0),
		spaceToBreak, spaceNotBeforeWord, spaces,
	)

	// splitUfakZeka is UfakZeka's, Qwen2's without contractions (Turkish suffixes after an
	// apostrophe stay with the word's letters):
	//
	//	[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	splitUfakZeka = alternation(
		prefixed(isLeadLN, isL, nil, 0),
		one(isN),
		prefixed(isBlank, isOtherLN, isBreak, -1),
		spaceToBreak, spaceNotBeforeWord, spaces,
	)

	// splitLaguna is Laguna's: lines and runs of line feeds, then Qwen2's expression.
	//
	//	[^\n]+|[\n]+
	//	(Qwen2's)
	splitLaguna = sequence(splitLines, splitQwen2)

	// splitExaoneMoE is EXAONE MoE's, where words joined by single spaces stay together:
	//
	//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+
	splitExaoneMoE = alternation(
		contractions(true),
		lettersWithSpaces,
		one(isN),
		prefixed(isBlank, isOtherLN, inSet("\r\n/"), 1),
		spaceToBreak, spaceNotBeforeWord, spaces,
	)

	// splitMiniCPM5 is MiniCPM 5's: digits in groups of up to three, then Llama 3's
	// expression (its \p{N}+ sees no longer digit runs).
	//
	//	\p{N}{1,3}
	//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	splitMiniCPM5 = sequence(alternation(atMost(isN, 3)), splitLlama3)

	// splitJais2 is Jais 2's, Llama 3's with whitespace cut into power-of-two runs:
	//
	//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}
	splitJais2 = alternation(
		contractions(true),
		prefixed(isLeadLN, isL, nil, 0),
		atMost(isN, 3),
		prefixed(isBlank, isOtherLN, isBreak, -1),
		spaceToBreak, cascadingSpaces,
	)

	// splitChameleon is Chameleon's: sentinel and image tokens, tabs, line feeds and runs of
	// two or four spaces, single digits, single punctuation marks, then GPT-2's expression.
	//
	//	<sentinel:[0-9]+>
	//	(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z
	//	([\t\n]|    |  )
	//	\p{N}
	//	[\p{P}!-/:-@\[-`{-~]
	//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
	splitChameleon = sequence(
		alternation(chameleonSentinel),
		alternation(chameleonImage),
		alternation(one(inSet("\t\n")), literal("    "), literal("  ")),
		alternation(one(isN)),
		alternation(one(func(r rune) bool { return isP(r) || isASCIIPunct(r) })),
		splitGPT2,
	)
)

// deepSeekV3Rules is the last expression of DeepSeek V3's split:
//
//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
var deepSeekV3Rules = []rule{
	punctThenLetters,
	prefixed(isLeadLPS, isLM, nil, 0),
	prefixed(isBlank, isPS, isBreak, -1),
	spaceToBreak, spaceNotBeforeWord, spaces,
}

// punctThenLetters is [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+: one ASCII punctuation
// character or symbol, then ASCII letters.
func punctThenLetters(s string, i int) int {
	if !isASCIIPunct(rune(s[i])) {
		return -1
	}
	if end := skipRun(s, i+1, isASCIILetter); end > i+1 {
		return end
	}
	return -1
}

// o200kRules is the alternation of the o200k family: the case-split words, digits in runs
// of at most maxDigits, punctuation with the tail characters after it, and whitespace.
func o200kRules(words rule, maxDigits int, tail string) []rule {
	return []rule{
		words,
		atMost(isN, maxDigits),
		prefixed(isBlank, isOtherLN, inSet(tail), -1),
		spaceToBreak, spaceNotBeforeWord, spaces,
	}
}

// exactly is [class]{k}.
func exactly(in func(rune) bool, k int) rule {
	return func(s string, i int) int {
		end := skipAtMost(s, i, in, k)
		if end > i && runeCount(s[i:end]) == k {
			return end
		}
		return -1
	}
}

func runeCount(s string) int {
	n := 0
	for range s {
		n++
	}
	return n
}

// isDefaultSymbol is [\$\+<=>\^~\|], the symbols llama.cpp's default split joins to
// punctuation.
func isDefaultSymbol(r rune) bool { return inSet("$+<=>^~|")(r) }

// isBloomStop is the class [(\s|.,!?…。，、।۔،)]: where BLOOM's words end.
func isBloomStop(r rune) bool { return isSpace(r) || inSet("(|.,!?…。，、।۔،)")(r) }

// splitNonSpace is \S+: words between whitespace (the whitespace kept as gaps).
var splitNonSpace = alternation(run(not(isSpace)))

// dropSpaces yields the runs of non-whitespace of s, dropping the whitespace between them
// (the first step of the "whitespace" tokenizer model).
func dropSpaces(s string, yield func(string)) {
	for i := 0; i < len(s); {
		start := skipRun(s, i, isSpace)
		end := skipRun(s, start, not(isSpace))
		if end > start {
			yield(s[start:end])
		}
		i = end
	}
}

// splitLines is [^\n]+|[\n]+: lines and runs of line feeds (Laguna; Gemma 4, whose spaces are
// already "▁", merges whole lines).
func splitLines(s string, yield func(string)) {
	for i := 0; i < len(s); {
		nl := s[i] == '\n'
		j := i
		for j < len(s) && (s[j] == '\n') == nl {
			j++
		}
		yield(s[i:j])
		i = j
	}
}
