package structured

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchChar is the JSON string character the JSON Schema compiler writes.
const benchChar = `char ::= [^\x00-\x1F"\\] | "\\" (["/\\bfnrt] | "u" ([0-9A-Ca-cE-Fe-f] ([0-9A-Fa-f]){3} | [Dd] [0-7] ([0-9A-Fa-f]){2}))
`

// fragmentGrammars returns the grammars TestFragmentsEquivalent compares: the package's
// fixtures, a few written here (strings counted out as the JSON Schema compiler does, a key
// pattern, repeated alternatives), and the GBNF files of the folder KVASIR_GBNF_DIR when set
// (the JSONSchemaBench schemas' grammars, say).
func fragmentGrammars(t *testing.T) map[string]*Grammar {
	t.Helper()
	out := map[string]*Grammar{}
	add := func(name string, g *Grammar, err error) {
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = g
	}
	files, _ := filepath.Glob("testdata/grammars/*")
	if dir := os.Getenv("KVASIR_GBNF_DIR"); dir != "" {
		more, _ := filepath.Glob(filepath.Join(dir, "*.gbnf"))
		files = append(files, more...)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var g *Grammar
		switch filepath.Ext(f) {
		case ".gbnf":
			g, err = ParseGBNF(string(src))
		case ".regex":
			g, err = ParseRegex(strings.TrimSpace(string(src)))
		case ".lark":
			g, err = ParseEBNF(string(src))
		default:
			continue
		}
		add(filepath.Base(f), g, err)
	}
	for name, src := range map[string]string{
		"string399": `root ::= "\"" (char){0,399} "\""` + "\n" + benchChar,
		"blocks":    `root ::= "\"" (((char){400})? (char){0,399} | ((char){400}){2} (char){0,224}) "\"" "," (char){8}` + "\n" + benchChar,
		"keys": `root ::= "{" ("\"" key "\":" string) ("," "\"" key "\":" string)* "}"
key ::= "a" | "b" ([a-z] | "c" ([a-z0-9]){0,12}) | "abc" | [x-z]+
string ::= "\"" (char)* "\""` + "\n" + benchChar,
		"repeated": `root ::= "[" (item ("," item){0,5})? "]" ("," (item | "x" item)){0,3}
item ::= ("red" | "green" | "reed" | "gr" [a-e]{1,3}) ([0-9]){0,2}`,
		"overlap": `root ::= ((a | "ab" | "abc") ("b" | "bc" | "c")?){0,9} "!"
a ::= "a" | "aa"`,
	} {
		g, err := ParseGBNF(src)
		add(name, g, err)
	}
	return out
}

// TestFragmentsEquivalent: every terminal built with embedded fragments accepts exactly what
// the plain Thompson construction's accepts.
func TestFragmentsEquivalent(t *testing.T) {
	lim := DefaultLimits()
	lim.Time = time.Minute
	for name, g := range fragmentGrammars(t) {
		plain, err1 := compile(g, lim, false)
		embedded, err2 := compile(g, lim, true)
		if (err1 == nil) != (err2 == nil) {
			t.Errorf("%s: plain compile error %v, with fragments %v", name, err1, err2)
			continue
		}
		if err1 != nil {
			continue
		}
		if len(plain.terms) != len(embedded.terms) {
			t.Errorf("%s: %d terminals, with fragments %d", name, len(plain.terms), len(embedded.terms))
			continue
		}
		for i := range plain.terms {
			if !equivalentDFA(plain.terms[i], embedded.terms[i]) {
				t.Errorf("%s: terminal %d (%.100s) differs with fragments", name, i, plain.termName(i))
			}
			if p, e := plain.terms[i].numStates(), embedded.terms[i].numStates(); p != e {
				t.Errorf("%s: terminal %d has %d states, with fragments %d (both minimal)", name, i, p, e)
			}
		}
	}
}

// cpuNow returns the process's CPU time (user and system).
func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCompileFragments compiles a JSON string of maxLength 400 (the JSON Schema
// compiler's `"` char{0,399} `"`) and the GBNF files of KVASIR_BENCH_GBNF (comma separated),
// with and without embedded fragments, reporting CPU time per compile besides wall time.
func BenchmarkCompileFragments(b *testing.B) {
	srcs := map[string]string{"string399": `root ::= "\"" (char){0,399} "\""` + "\n" + benchChar}
	for _, f := range strings.Split(os.Getenv("KVASIR_BENCH_GBNF"), ",") {
		if f != "" {
			src, err := os.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			srcs[strings.TrimSuffix(filepath.Base(f), ".gbnf")] = string(src)
		}
	}
	lim := DefaultLimits()
	lim.Time = time.Minute
	for name, src := range srcs {
		g, err := ParseGBNF(src)
		if err != nil {
			b.Fatal(err)
		}
		for _, frags := range []bool{false, true} {
			b.Run(name+map[bool]string{false: "/plain", true: "/fragments"}[frags], func(b *testing.B) {
				c0 := cpuNow()
				for b.Loop() {
					if _, err := compile(g, lim, frags); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((cpuNow()-c0).Microseconds())/1e3/float64(b.N), "cpu-ms/op")
			})
		}
	}
}
