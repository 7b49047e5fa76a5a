package structured

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// BenchmarkMaskLlama3JSON reports the mask time on the Llama 3 vocabulary over random
// generations from the JSON grammar: mean, p50 and p99 per mask (first masks of a lexeme
// state, which fill the cache, included).
func BenchmarkMaskLlama3JSON(b *testing.B) {
	v := loadLlama3(b)
	trie, err := NewTokenTrie(v)
	if err != nil {
		b.Fatal(err)
	}
	c := mustGBNF(b, jsonGBNF)
	tg := NewTokenGrammar(c, trie, v)
	rng := rand.New(rand.NewPCG(1, 1))
	var all []time.Duration
	b.ResetTimer()
	for range b.N {
		gen, err := Simulate(tg, rng, 200)
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, gen.Masks...)
	}
	b.StopTimer()
	slices.Sort(all)
	var sum time.Duration
	for _, d := range all {
		sum += d
	}
	b.ReportMetric(float64(sum.Microseconds())/float64(len(all)), "mean-us/mask")
	b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-us/mask")
	b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds())/1e3, "p99-us/mask")
}

// BenchmarkWalkLexemeLlama3 times first walks (no cache) of lexeme states on the Llama 3
// vocabulary: inside an unbounded JSON string, and counting states of a string of at most
// 64 characters with 60, 20 and 8 left.
func BenchmarkWalkLexemeLlama3(b *testing.B) {
	v := loadLlama3(b)
	trie, err := NewTokenTrie(v)
	if err != nil {
		b.Fatal(err)
	}
	char := `([ !#-\[\]-~] | [\u0080-\U0010FFFF] | "\\" ["\\/bfnrt])`
	cases := []struct {
		name  string
		src   string
		bytes int // plain characters read after the opening quote
	}{
		{"unbounded", `root ::= "\"" ` + char + `* "\","`, 0},
		{"left60", `root ::= "\"" ` + char + `{0,64} "\","`, 4},
		{"left20", `root ::= "\"" ` + char + `{0,64} "\","`, 44},
		{"left8", `root ::= "\"" ` + char + `{0,64} "\","`, 56},
	}
	for _, tc := range cases {
		c := mustGBNF(b, tc.src)
		tg := NewTokenGrammar(c, trie, v)
		d := c.terms[0]
		q := d.step(d.start, '"')
		for range tc.bytes {
			q = d.step(q, 'a')
		}
		b.Run(tc.name, func(b *testing.B) {
			var stack []uint32
			for range b.N {
				tg.walkLexeme(0, q, stack)
			}
		})
	}
}
