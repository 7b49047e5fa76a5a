package jsonschema

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	validator "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/kvasir-llm/kvasir/internal/structured"
)

// compileMatcher parses GBNF with the grammar engine (internal/structured) and returns a
// whole-string matcher: the tests check the generated text with the engine that will
// enforce it.
func compileMatcher(gbnf string) (func(string) bool, error) {
	g, err := structured.ParseGBNF(gbnf)
	if err != nil {
		return nil, fmt.Errorf("generated GBNF does not parse: %v\n%s", err, truncate(gbnf, 4000))
	}
	c, err := structured.Compile(g, structured.DefaultLimits())
	if err != nil {
		return nil, fmt.Errorf("generated GBNF (%d bytes) does not compile: %v", len(gbnf), truncate(err.Error(), 300))
	}
	return c.Matches, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// validatorFor compiles schema with the validator library, asserting formats.
func validatorFor(schema []byte) (*validator.Schema, error) {
	doc, err := validator.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	openAPINullable(doc)
	c := validator.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("file:///schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("file:///schema.json")
}

// validates reports whether the validator accepts the JSON text inst.
func validates(sch *validator.Schema, inst string) error {
	v, err := validator.UnmarshalJSON(strings.NewReader(inst))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}

// sampler draws random strings from a grammar: a walk that picks alternatives and
// repetition counts at random and, below a depth limit, takes the shortest way out so that
// every walk ends.
type sampler struct {
	g        *grammar
	rng      *rand.Rand
	shortest map[string]int // fewest bytes each rule can match
	b        strings.Builder
}

const unreachable = 1 << 30

func newSampler(g *grammar, seed uint64) *sampler {
	s := &sampler{g: g, rng: rand.New(rand.NewPCG(seed, 1)), shortest: map[string]int{}}
	for _, n := range g.names {
		s.shortest[n] = unreachable
	}
	for changed := true; changed; {
		changed = false
		for _, n := range g.names {
			if l := s.minLen(g.rules[n]); l < s.shortest[n] {
				s.shortest[n], changed = l, true
			}
		}
	}
	return s
}

func (s *sampler) minLen(e expr) int {
	switch e := e.(type) {
	case lit:
		return len(e)
	case class:
		return 1
	case ref:
		return s.shortest[string(e)]
	case seq:
		n := 0
		for _, p := range e {
			n = min(n+s.minLen(p), unreachable)
		}
		return n
	case alt:
		n := unreachable
		for _, p := range e {
			n = min(n, s.minLen(p))
		}
		return n
	case rep:
		return min(e.min*s.minLen(e.e), unreachable)
	}
	return unreachable
}

// sample returns one string of the grammar.
func (s *sampler) sample() string {
	s.b.Reset()
	s.walk(ref("root"), 0)
	return s.b.String()
}

func (s *sampler) walk(e expr, depth int) {
	deep := depth > 40
	switch e := e.(type) {
	case lit:
		s.b.WriteString(string(e))
	case class:
		s.b.WriteRune(s.pick(e))
	case ref:
		s.walk(s.g.rules[string(e)], depth+1)
	case seq:
		for _, p := range e {
			s.walk(p, depth)
		}
	case alt:
		var choices []expr
		for _, c := range e {
			if s.minLen(c) < unreachable {
				choices = append(choices, c)
			}
		}
		if deep {
			slices.SortStableFunc(choices, func(a, b expr) int { return s.minLen(a) - s.minLen(b) })
			s.walk(choices[0], depth+1)
			return
		}
		s.walk(choices[s.rng.IntN(len(choices))], depth+1)
	case rep:
		n := e.min
		if !deep {
			hi := e.min + 3
			if e.max >= 0 {
				hi = min(hi, e.max)
			}
			n += s.rng.IntN(hi - e.min + 1)
		}
		for range n {
			s.walk(e.e, depth+1)
		}
	}
}

// pick draws a character of c, preferring printable ASCII and a few others.
func (s *sampler) pick(c class) rune {
	in := func(r rune) bool {
		hit := false
		for _, rg := range c.ranges {
			if r >= rg.lo && r <= rg.hi {
				hit = true
			}
		}
		return hit != c.negated
	}
	candidates := []rune("aZ09 _-.~é€😀\"\\\n\t/:@")
	for range 8 {
		r := rune(0x20 + s.rng.IntN(0x5f))
		if s.rng.IntN(4) == 0 {
			r = candidates[s.rng.IntN(len(candidates))]
		}
		if in(r) {
			return r
		}
	}
	for _, rg := range c.ranges {
		if !c.negated {
			return rg.lo + rune(s.rng.IntN(int(rg.hi-rg.lo)+1))
		}
	}
	for r := rune(0x20); r < 0x10000; r++ {
		if in(r) {
			return r
		}
	}
	return 'a'
}

// openAPINullable rewrites OpenAPI's "nullable": true, which the validator does not know,
// as the JSON Schema it means: "null" added to the type.
func openAPINullable(v any) {
	switch v := v.(type) {
	case map[string]any:
		if v["nullable"] == true {
			switch t := v["type"].(type) {
			case string:
				v["type"] = []any{t, "null"}
			case []any:
				v["type"] = append(t, "null")
			}
		}
		for _, e := range v {
			openAPINullable(e)
		}
	case []any:
		for _, e := range v {
			openAPINullable(e)
		}
	}
}
